import { test, expect, Page } from '@playwright/test';
import { createHmac } from 'node:crypto';
import { openHydrated, receivedCount, signIn } from './helpers';
import { destinationURL, e2eSources } from '../playwright.config';

// destination.mjs lists three Stripe events; the receiver got only the first.
// A dry run reports the other two missing, a real run recovers them through
// the dedup claim and they are forwarded once each, linked to their events.

async function runNow(page: Page, mode: 'dry_run' | 'recover') {
  const panel = page.locator('[data-testid="reconcile-source"][data-source="e2e-stripe"]');
  await panel.getByLabel('Mode').selectOption(mode);
  await panel.getByRole('button', { name: 'Run reconciliation of e2e-stripe' }).click();
  return panel;
}

test('an operator compares with Stripe, then recovers what never arrived, once', async ({ page, request }) => {
  const events = (await (await request.get(`${destinationURL}/stripe-events`)).json()) as { id: string }[];
  // The one delivery that reached us, signed as Stripe signs.
  const body = JSON.stringify(events[0]);
  const t = Math.floor(Date.now() / 1000);
  const v1 = createHmac('sha256', e2eSources.stripeSecret).update(`${t}.${body}`).digest('hex');
  const delivered = await request.post('/hooks/e2e-stripe', {
    headers: { 'content-type': 'application/json', 'stripe-signature': `t=${t},v1=${v1}` },
    data: body,
  });
  expect(delivered.status()).toBe(200);

  await signIn(page, 'operator');
  const errors = await openHydrated(page, '/reconciliation');
  await expect(page.getByRole('heading', { level: 1, name: 'Reconciliation' })).toBeVisible();
  await expect(page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Reconciliation' })).toBeVisible();
  // Sources without a list say why.
  await expect(page.locator('[data-testid="not-reconciled"] tr[data-source="e2e-standard"]')).toContainText('Standard Webhooks');
  await expect(page.locator('[data-testid="not-reconciled"] tr[data-source="e2e-github"]')).toContainText('[source.reconcile]');

  let panel = await runNow(page, 'dry_run');
  await expect(page.getByTestId('run-result')).toContainText('Dry run of e2e-stripe: 3 seen, 1 already received, 0 recovered');
  await expect(panel.getByTestId('run-result')).toHaveCount(0);
  await expect(panel.locator('[data-figure="still_missing"]')).toHaveText('2');
  const findings = panel.getByTestId('findings').locator('tbody tr');
  await expect(findings).toHaveCount(2);
  await expect(panel.locator(`tr[data-key="${events[1].id}"]`)).toContainText('not received');
  expect(await receivedCount(request, `e2e-stripe:${events[1].id}`)).toBe(0);

  panel = await runNow(page, 'recover');
  await expect(page.getByTestId('run-result')).toContainText('Run of e2e-stripe: 3 seen, 1 already received, 2 recovered');
  await expect(panel.locator('[data-figure="recovered"]')).toHaveText('2');
  await expect(panel.getByTestId('missed-total')).toContainText('2 events found missing');
  const recovered = panel.locator(`tr[data-key="${events[1].id}"]`);
  await expect(recovered).toHaveAttribute('data-verdict', 'recovered');
  await expect(panel.getByTestId('runs').locator('tbody tr')).toHaveCount(2);
  for (const e of events) {
    await expect.poll(() => receivedCount(request, `e2e-stripe:${e.id}`)).toBe(1);
  }
  // Linked to the event it became, which says where it came from.
  await page.reload();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await page.locator(`tr[data-key="${events[1].id}"]`).getByRole('link').click();
  await expect(page).toHaveURL(/\/events\/\d+$/);
  await expect(page.locator('main')).toContainText(events[1].id);
  const html = await page.content();
  expect(html).not.toContain('sk_test_e2e_reconcile');
  expect(errors).toEqual([]);
});

test('a viewer reads the reconciliation but may not run one', async ({ page }) => {
  await signIn(page, 'viewer');
  await openHydrated(page, '/reconciliation?source=e2e-stripe');
  const panel = page.locator('[data-testid="reconcile-source"][data-source="e2e-stripe"]');
  await expect(panel).toBeVisible();
  await expect(page.getByTestId('reconcile-source')).toHaveCount(1);
  await expect(panel.getByRole('button', { name: /Run reconciliation/ })).toHaveCount(0);
  expect(await page.content()).not.toContain('sk_test_e2e_reconcile');
});
