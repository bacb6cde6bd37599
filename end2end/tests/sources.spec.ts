import { test, expect } from '@playwright/test';
import { openHydrated, signIn } from './helpers';

test.beforeEach(async ({ page }) => { await signIn(page, 'viewer'); });

test('the Sources page lists the running server\'s configured sources', async ({ page }) => {
  const errors = await openHydrated(page, '/sources');
  await expect(page).toHaveTitle('replaysafe');
  await expect(page.getByRole('heading', { level: 1, name: 'Sources' })).toBeVisible();

  const rows = page.getByTestId('sources-table').locator('tbody tr');
  await expect(rows).toHaveCount(7);

  const github = page.locator('tr[data-slug="e2e-github"]');
  await expect(github.locator('td').nth(1)).toHaveText('github');
  await expect(github.locator('td').nth(2)).toHaveText('ack');
  await expect(github).toContainText('paused');

  const standard = page.locator('tr[data-slug="e2e-standard"]');
  await expect(standard.locator('td').nth(1)).toHaveText('standard');
  await expect(standard).toContainText('active');
  await expect(standard).toContainText('/hook');

  expect(errors).toEqual([]);
});

test('secrets from the config never reach the page', async ({ page }) => {
  await openHydrated(page, '/sources');
  const html = await page.content();
  expect(html).not.toContain('e2e-github-secret-never-shown');
  expect(html).not.toContain('whsec_');
});

test('the root redirects to the overview and unknown pages say so with a 404', async ({ page }) => {
  await openHydrated(page, '/');
  await expect(page).toHaveURL(/\/overview$/);

  const response = await page.goto('/no-such-page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Not found' })).toBeVisible();
  // The way back is a real link to a real page.
  await page.getByRole('link', { name: 'Go to the overview' }).click();
  await expect(page.getByRole('heading', { level: 1, name: 'Overview' })).toBeVisible();
});

test('health and readiness answer for orchestrators', async ({ request }) => {
  const health = await request.get('/healthz');
  expect(health.status()).toBe(200);
  const ready = await request.get('/readyz');
  expect(ready.status()).toBe(200);
  expect(await ready.text()).toBe('ready');
});
