// bench/destination.js: the application a pipeline benchmark forwards to. It
// answers 200 at once and counts what it received; GET /count says how many.
// Node's http module, no dependencies. Usage: node destination.js PORT
const http = require('http');
const port = Number(process.argv[2] || 3402);
let received = 0;
http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/count') {
    res.end(String(received));
    return;
  }
  req.on('data', () => {});
  req.on('end', () => {
    received++;
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
}).listen(port, '127.0.0.1');
