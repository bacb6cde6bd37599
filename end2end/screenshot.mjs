// Signs in to a running replaysafe and saves the overview as a PNG
// (scripts/screenshot): node screenshot.mjs URL USER PASSWORD OUT.
import { chromium } from '@playwright/test';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

const [url, username, password, out] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 }, timezoneId: 'UTC', colorScheme: 'light' });
await page.goto(`${url}/login`);
await page.locator('body[data-hydrated="true"]').waitFor();
await page.getByLabel('Username').fill(username);
await page.getByLabel('Password').fill(password);
await page.getByRole('button', { name: 'Sign in' }).click();
await page.getByRole('heading', { name: 'Overview' }).waitFor();
await page.locator('figure.chart').first().waitFor();
mkdirSync(dirname(out), { recursive: true });
await page.screenshot({ path: out, fullPage: false });
// What the Incidents page says at that moment, for whoever runs this.
await page.goto(`${url}/incidents`);
await page.locator('body[data-hydrated="true"]').waitFor();
console.log((await page.locator('main').innerText()).replace(/\n{2,}/g, '\n'));
await browser.close();
