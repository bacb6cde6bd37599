// Test accounts, made with the real CLI (`replaysafe users add`, password on
// stdin) against the database the server under test uses.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { accounts, configPath, databaseUrl } from './playwright.config';

export default async function globalSetup() {
  const binary = process.env.E2E_BINARY ?? './target/debug/replaysafe';
  for (const [role, account] of Object.entries(accounts)) {
    execFileSync(binary, ['users', 'add', '--config', configPath, '--username', account.username, '--role', role, '--update'], {
      cwd: join(__dirname, '..'),
      input: `${account.password}\n`,
      env: { ...process.env, DATABASE_URL: databaseUrl, E2E_GITHUB_SECRET: 'unused', RUST_LOG: 'warn' },
      stdio: ['pipe', 'ignore', 'inherit'],
    });
  }
}
