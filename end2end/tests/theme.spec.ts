// Night and day (issue 40 item 3): the dashboard follows the system's
// colour scheme, and every page passes axe-core's contrast check (WCAG AA)
// in both, with the data it shows after the other tests' traffic; motion
// is held back on request, and the live table can be paused.
import { test, expect } from '@playwright/test';
import AxeBuilder from '@axe-core/playwright';
import { openHydrated, signIn, sendSigned, eventId } from './helpers';

const pages = ['/overview', '/deliveries', '/dead', '/incidents', '/sources', '/alerts', '/audit', '/tokens', '/users', '/account'];

for (const scheme of ['light', 'dark'] as const) {
  test(`every page has enough contrast in the ${scheme} theme`, async ({ browser }) => {
    const context = await browser.newContext({ colorScheme: scheme });
    const page = await context.newPage();
    await signIn(page, 'admin');
    const background = await page.evaluate(() => getComputedStyle(document.body.parentElement!).backgroundColor);
    // The theme is really the one asked for: a dark page's background is dark.
    const [r, g, b] = background.match(/\d+/g)!.map(Number);
    expect(scheme === 'dark' ? r + g + b < 150 : r + g + b > 600).toBe(true);
    for (const path of pages) {
      await openHydrated(page, path);
      const results = await new AxeBuilder({ page }).withRules(['color-contrast']).analyze();
      const failures = results.violations.flatMap((v) => v.nodes.map((n) => `${path}: ${n.target.join(' ')}: ${n.failureSummary}`));
      expect(failures, failures.join('\n')).toEqual([]);
    }
    await context.close();
  });
}

test('motion is held back for those who ask for less', async ({ browser }) => {
  const context = await browser.newContext({ reducedMotion: 'reduce' });
  const page = await context.newPage();
  await signIn(page, 'viewer');
  await openHydrated(page, '/deliveries');
  // A row as live inserts mark it: no flash.
  const animated = await page.evaluate(() => {
    const table = document.createElement('table');
    table.innerHTML = '<tbody><tr class="fresh"><td>new</td></tr></tbody>';
    document.body.appendChild(table);
    const name = getComputedStyle(table.querySelector('td')!).animationName;
    table.remove();
    return name;
  });
  expect(animated).toBe('none');
  await context.close();
});

test('the live deliveries table can be paused, and resumed with what came meanwhile', async ({ page, request }) => {
  await signIn(page, 'viewer');
  await openHydrated(page, '/deliveries');
  const table = page.getByTestId('deliveries-table');
  await page.getByTestId('live-pause').click();
  await expect(page.getByTestId('live-status')).toContainText('Paused');
  await expect(page.getByTestId('live-pause')).toHaveAttribute('aria-pressed', 'true');
  const held = eventId('held');
  expect((await sendSigned(request, 'e2e-standard', held, '{"type":"held.back"}')).status).toBe(200);
  // Three polls' worth: it stays out while paused.
  await page.waitForTimeout(6_000);
  await expect(table.locator('tbody tr').filter({ hasText: held })).toHaveCount(0);
  await page.getByTestId('live-pause').click();
  await expect(table.locator('tbody tr').filter({ hasText: held })).toHaveCount(1, { timeout: 10_000 });
  await expect(page.getByTestId('live-status')).toContainText('new since this page opened');
});
