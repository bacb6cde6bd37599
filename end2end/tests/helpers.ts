import { expect, Page } from '@playwright/test';

/** Opens a page and waits until the WebAssembly bundle has hydrated it. */
export async function openHydrated(page: Page, path: string) {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(path);
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  return errors;
}
