-- wrk script: replays the signed requests of gen_requests.py.
-- ADAPTED for replaysafe (bench/run), the only change to this reference file: response()
-- reads "new" vs "dup" from replaysafe's x-replaysafe-outcome header when the answer has
-- one (200 claimed = new; 200 in_progress/completed/dead = dup), and falls back to the
-- reference's body test ("Already processed" = dup) for the Node reference, which sends
-- no such header. Counting, slicing and the RESULT line are unchanged.
--   REQS=requests.tsv  WEBHOOK_PATH=/webhooks/bench  WRK_THREADS=<same as wrk -t>
-- Thread i of WRK_THREADS walks the i-th contiguous slice of the file (wrapping,
-- and saying so, if it runs out). Requests are pre-formatted at init, so the
-- per-request Lua cost is a table lookup plus counting the response status.
local REQS = os.getenv("REQS") or "requests.tsv"
local PATH = os.getenv("WEBHOOK_PATH") or "/webhooks/bench"
local NT = tonumber(os.getenv("WRK_THREADS") or "1")

local function count_lines()
  local n = 0
  for _ in io.lines(REQS) do n = n + 1 end
  return n
end

-- main state: remember threads, hand each its index
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

-- thread state
local reqs, first, len, pos = {}, 0, 0, 0
sent, wrapped, ok, dup, c409, c4xx, c5xx, other = 0, 0, 0, 0, 0, 0, 0, 0

function init(args)
  assert(tid < NT, "WRK_THREADS must equal wrk -t")
  local n = count_lines()
  len = math.floor(n / NT)
  first = tid * len + 1
  local i = 0
  for line in io.lines(REQS) do
    i = i + 1
    if i >= first and i < first + len then
      local id, ts, sig, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
      reqs[#reqs + 1] = wrk.format("POST", PATH, {
        ["Content-Type"] = "application/json",
        ["webhook-id"] = id, ["webhook-timestamp"] = ts, ["webhook-signature"] = sig,
      }, body)
    end
  end
end

function request()
  pos = pos + 1
  if pos > len then pos, wrapped = 1, wrapped + 1 end
  sent = sent + 1
  return reqs[pos]
end

function response(status, headers, body)
  if status == 200 then
    local outcome = headers["x-replaysafe-outcome"]  -- ADAPTED (see top): replaysafe
    if outcome then
      if outcome == "claimed" then ok = ok + 1 else dup = dup + 1 end
    elseif body:find("^[Aa]lready") then dup = dup + 1 else ok = ok + 1 end
  elseif status == 409 then c409 = c409 + 1
  elseif status >= 400 and status < 500 then c4xx = c4xx + 1
  elseif status >= 500 then c5xx = c5xx + 1
  else other = other + 1 end
end

-- main state: aggregate, and count the distinct ids that were actually sent
function done(summary, latency, requests)
  local n = count_lines()
  local per = math.floor(n / NT)
  local want, t = {}, { ok = 0, dup = 0, c409 = 0, c4xx = 0, c5xx = 0, other = 0, sent = 0, wrapped = 0 }
  for _, th in ipairs(threads) do
    for k in pairs(t) do t[k] = t[k] + th:get(k) end
    local a = th:get("tid") * per + 1
    want[#want + 1] = { a, a + math.min(th:get("sent"), per) - 1 }
  end
  local seen, distinct, i = {}, 0, 0
  for line in io.lines(REQS) do
    i = i + 1
    for _, r in ipairs(want) do
      if i >= r[1] and i <= r[2] then
        local id = line:match("^[^\t]*")
        if not seen[id] then seen[id], distinct = true, distinct + 1 end
        break
      end
    end
  end
  local e = summary.errors
  local sockerr = e.connect + e.read + e.write + e.timeout
  local secs = summary.duration / 1e6
  local ms = function(p) return latency:percentile(p) / 1000 end
  io.write(string.format("requests %d in %.1fs = %.0f req/s (sent %d, %d thread wraps)\n",
    summary.requests, secs, summary.requests / secs, t.sent, t.wrapped))
  io.write(string.format("status: 200 new %d, 200 dup %d, 409 %d, 4xx %d, 5xx %d, other %d, socket errors %d (c%d r%d w%d t%d)\n",
    t.ok, t.dup, t.c409, t.c4xx, t.c5xx, t.other, sockerr, e.connect, e.read, e.write, e.timeout))
  io.write(string.format("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", ms(50), ms(90), ms(99), latency.max / 1000))
  io.write(string.format("distinct ids sent %d\n", distinct))
  io.write(string.format("RESULT rps=%.0f p50=%.2f p90=%.2f p99=%.2f max=%.2f ok=%d dup=%d c409=%d c4xx=%d c5xx=%d other=%d sockerr=%d sent=%d distinct=%d wraps=%d\n",
    summary.requests / secs, ms(50), ms(90), ms(99), latency.max / 1000,
    t.ok, t.dup, t.c409, t.c4xx, t.c5xx, t.other, sockerr, t.sent, distinct, t.wrapped))
end
