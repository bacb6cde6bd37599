import { defineConfig } from '@playwright/test';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

// scripts/test exports these; the defaults let `npx playwright test` run by hand
// against a server built by ./scripts/test (or `cargo leptos build`) and a database URL.
const port = Number(process.env.E2E_PORT ?? 3100);
const baseURL = `http://127.0.0.1:${port}`;
const destinationPort = Number(process.env.E2E_DEST_PORT ?? port + 1);
export const destinationURL = `http://127.0.0.1:${destinationPort}`;
const maybeDatabaseUrl = process.env.E2E_DATABASE_URL ?? process.env.DATABASE_URL;
if (!maybeDatabaseUrl) throw new Error('set E2E_DATABASE_URL (or DATABASE_URL) to an empty database');
export const databaseUrl: string = maybeDatabaseUrl;

/** One account per role, made by global-setup.ts with `replaysafe users add`. */
export const accounts = {
  viewer: { username: 'e2e-viewer', password: 'viewer-password-e2e' },
  operator: { username: 'e2e-operator', password: 'operator-password-e2e' },
  admin: { username: 'e2e-admin', password: 'admin-password-e2e' },
};

// The config the server under test runs with; tests read the same values.
export const e2eSources = {
  standardSecret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  githubSecret: 'e2e-github-secret-never-shown',
  stripeSecret: 'whsec_e2e_stripe_signing_secret',
};
const configDir = join(__dirname, '.cache');
mkdirSync(configDir, { recursive: true });
export const configPath = join(configDir, 'replaysafe.e2e.toml');
writeFileSync(
  configPath,
  `listen = "127.0.0.1:${port}"
public_url = "${baseURL}"
data_dir = "./data"

# Alerts (and so the banner) within a second of what fires them.
[alerts]
evaluate_every_secs = 1
resolve_after_secs = 0

[[source]]
slug = "e2e-standard"
provider = "standard"
secrets = ["${e2eSources.standardSecret}"]
destination = "${destinationURL}/hook"
destination_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
max_attempts = 3

[[source]]
slug = "e2e-overview"
provider = "standard"
secrets = ["${e2eSources.standardSecret}"]
destination = "${destinationURL}/hook"
destination_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

[[source]]
slug = "e2e-storm"
provider = "standard"
secrets = ["${e2eSources.standardSecret}"]
destination = "${destinationURL}/hook"
destination_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

# Fan-out: billing refuses each event's first try (dead at once), crm takes it.
[[source]]
slug = "e2e-fanout"
provider = "standard"
secrets = ["${e2eSources.standardSecret}"]

[[source.destination]]
name = "billing"
url = "${destinationURL}/refuse-once"
secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

[[source.destination]]
name = "crm"
url = "${destinationURL}/hook"
secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

# An ordered destination: an event it keeps refusing ("poison" keys, 500)
# blocks its account's later events until an operator dead-letters it.
[[source]]
slug = "e2e-ordered"
provider = "standard"
secrets = ["${e2eSources.standardSecret}"]
max_attempts = 20

[[source.destination]]
name = "ledger"
url = "${destinationURL}/hook"
secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
ordering = "per_key"
ordering_key = "/account"

# Reconciled against destination.mjs's stand-in for Stripe's event list.
[[source]]
slug = "e2e-stripe"
provider = "stripe"
secrets = ["${e2eSources.stripeSecret}"]
destination = "${destinationURL}/hook"
destination_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

[source.reconcile]
api_base = "${destinationURL}"
api_key = "sk_test_e2e_reconcile"
every_minutes = 0

[[source]]
slug = "e2e-github"
provider = "github"
secrets = ["env:E2E_GITHUB_SECRET"]
destination = "http://127.0.0.1:9/unused"
paused = true
`,
);

// What the server under test logs goes to a file, not to the run's output:
// a green run prints none of it. Should the server exit, its last lines are
// printed (Playwright shows the web server's stderr). The file is emptied
// when the server starts (this config is also loaded by every worker).
export const serverLog = join(__dirname, '..', 'target', 'test-logs', 'e2e', 'replaysafe-serve.log');
mkdirSync(dirname(serverLog), { recursive: true });

export default defineConfig({
  testDir: './tests',
  globalSetup: './global-setup.ts',
  timeout: 30_000,
  fullyParallel: false,
  workers: 1,
  forbidOnly: !!process.env.CI,
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    baseURL,
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: '/usr/bin/chromium',
      // Without the networking flags Chromium floods the closed network.
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    },
  },
  webServer: [{
    command: `node destination.mjs ${destinationPort}`,
    url: `${destinationURL}/health`,
    reuseExistingServer: false,
  }, {
    command: `${process.env.E2E_BINARY ?? "./target/debug/replaysafe"} serve --config ${configPath} > '${serverLog}' 2>&1`
      + ` || { echo "replaysafe serve exited; the end of ${serverLog}:" >&2; tail -n 200 '${serverLog}' >&2; exit 1; }`,
    cwd: '..',
    url: `${baseURL}/readyz`,
    timeout: 120_000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe',
    env: {
      DATABASE_URL: databaseUrl,
      LEPTOS_SITE_ROOT: 'target/site',
      E2E_GITHUB_SECRET: e2eSources.githubSecret,
      RUST_LOG: 'info',
      NO_COLOR: '1',
    },
  }],
});
