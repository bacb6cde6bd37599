// Incidents (issue 40): a burst of identical 400s opens one incident; an
// operator acknowledges it, re-delivers its events once each from its page
// (through the dedup layer) and resolves it.
import { test, expect } from '@playwright/test';
import { openHydrated, sendSigned, eventId, signIn, received } from './helpers';

function letters(n: number): string {
  return Array.from({ length: n }, () => String.fromCharCode(97 + Math.floor(Math.random() * 26))).join('');
}

test('a burst of identical 400s is one incident, acknowledged, re-delivered once from its page, and resolved', async ({ page, request }) => {
  const batch = letters(8);
  const ids = Array.from({ length: 5 }, () => eventId(`refuse-once-currency-${batch}`));
  for (const id of ids) {
    const sent = await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'invoice.created' }));
    expect(sent.status).toBe(200);
  }
  const title = `invalid currency in batch ${batch} for order <n>`;

  await signIn(page, 'operator');
  await expect(async () => {
    await openHydrated(page, '/incidents');
    await expect(page.getByTestId('incidents-table')).toContainText(title, { timeout: 1_000 });
    await expect(page.getByTestId('incidents-table').locator('tr').filter({ hasText: title })).toContainText('5', { timeout: 1_000 });
  }).toPass({ timeout: 30_000 });
  const row = page.getByTestId('incidents-table').locator('tr').filter({ hasText: title });
  await expect(row).toHaveAttribute('data-state', 'open');
  await row.getByRole('link').click();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByTestId('incident-title')).toContainText(`HTTP 400 ${title}`);
  await expect(page.getByTestId('incident-facts')).toContainText('5 events');
  await expect(page.getByTestId('incident-sample')).toContainText(`invalid currency in batch ${batch} for order`);
  await expect(page.getByTestId('incident-events').locator('tr[data-state="dead"]')).toHaveCount(5);

  await page.getByTestId('incident-ack').click();
  await expect(page.getByTestId('incident-facts')).toHaveAttribute('data-state', 'acknowledged');
  await expect(page.getByTestId('incident-facts')).toContainText('by e2e-operator');

  await expect(page.getByTestId('incident-redeliver')).toContainText('Re-deliver the 5 affected events');
  await page.getByTestId('incident-redeliver').click();
  await expect(page.getByTestId('incident-redeliver-progress')).toContainText('5 of 5 re-delivered, 5 queued again, 0 refused — done.', { timeout: 20_000 });
  for (const id of ids) {
    await expect.poll(async () => (await received(request, `e2e-standard:${id}`)).count, { timeout: 15_000 }).toBe(2);
  }
  await page.reload();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByTestId('incident-events').locator('tr[data-state="completed"]')).toHaveCount(5, { timeout: 10_000 });
  // Nothing is dead any more: the button has nothing to take.
  await expect(page.getByTestId('incident-redeliver')).toContainText('Re-deliver the 0 affected events');
  await expect(page.getByTestId('incident-redeliver')).toBeDisabled();

  await page.getByTestId('incident-resolve').click();
  await expect(page.getByTestId('incident-facts')).toHaveAttribute('data-state', 'resolved');
  for (const id of ids) expect((await received(request, `e2e-standard:${id}`)).count).toBe(2);

  // A viewer reads it but has no moves.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, 'viewer');
  await openHydrated(page, '/incidents');
  await expect(page.getByTestId('incidents-table').locator('tr').filter({ hasText: title })).toHaveAttribute('data-state', 'resolved');
  await page.getByTestId('incidents-table').locator('tr').filter({ hasText: title }).getByRole('link').click();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByTestId('incident-facts')).toBeVisible();
  await expect(page.getByTestId('incident-redeliver')).toHaveCount(0);
});
