import { expect, Page, APIRequestContext } from '@playwright/test';
import { createHmac, randomUUID } from 'node:crypto';
import { e2eSources, destinationURL, accounts } from '../playwright.config';

/** Opens a page and waits until the WebAssembly bundle has hydrated it. */
export async function openHydrated(page: Page, path: string) {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(path);
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  return errors;
}

/** A fresh event id, unique across runs; `tag` lands in it (the destination reads it). */
export function eventId(tag = 'evt'): string {
  return `${tag}_${randomUUID().slice(0, 8)}`;
}

/** Signs like a Standard Webhooks provider and posts to a source's receiver. */
export async function sendSigned(
  request: APIRequestContext,
  slug: string,
  id: string,
  body: string,
  opts: { secret?: string; wrongSecret?: boolean; ageSecs?: number } = {},
) {
  const secret = opts.secret ?? e2eSources.standardSecret;
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const ts = (Math.floor(Date.now() / 1000) - (opts.ageSecs ?? 0)).toString();
  const signingKey = opts.wrongSecret ? Buffer.from('not-the-secret') : key;
  const sig = createHmac('sha256', signingKey).update(`${id}.${ts}.${body}`).digest('base64');
  const response = await request.post(`/hooks/${slug}`, {
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': ts,
      'webhook-signature': `v1,${sig}`,
    },
    data: body,
  });
  return { status: response.status(), outcome: response.headers()['x-replaysafe-outcome'] };
}

/** How many times the test destination received a key (`slug:id`). */
export async function receivedCount(request: APIRequestContext, idempotencyKey: string) {
  const r = await request.get(`${destinationURL}/received/${encodeURIComponent(idempotencyKey)}`);
  return (await r.json()).count as number;
}

export type Role = keyof typeof accounts;

/** Signs in through the login page as the test account of `role`. */
export async function signIn(page: Page, role: Role) {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto('/login');
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await page.getByLabel('Username').fill(accounts[role].username);
  await page.getByLabel('Password').fill(accounts[role].password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('whoami')).toContainText(role);
  return errors;
}

/** What the test destination saw for a key: requests, and how many were forced. */
export async function received(request: APIRequestContext, idempotencyKey: string) {
  const r = await request.get(`${destinationURL}/received/${encodeURIComponent(idempotencyKey)}`);
  return (await r.json()) as { count: number; forced: number };
}
