import { test, expect, ConsoleMessage } from '@playwright/test';
import { sendSigned, eventId, signIn } from './helpers';

/** Every page hydrates and works under its Content Security Policy: nothing is refused. */
test('every page runs under its Content Security Policy with no violation', async ({ page, request }) => {
  const violations: string[] = [];
  const noteViolation = (message: ConsoleMessage) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) violations.push(message.text());
  };
  page.on('console', noteViolation);
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) =>
      console.error(`Refused to load: CSP ${e.violatedDirective} blocked ${e.blockedURI}`),
    );
  });

  const id = eventId('csp');
  expect((await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'csp.check' }))).status).toBe(200);
  await signIn(page, 'admin');

  const visit = async (path: string) => {
    const response = await page.goto(path);
    expect(response, path).not.toBeNull();
    const headers = response!.headers();
    const csp = headers['content-security-policy'] ?? '';
    expect(csp, `${path} CSP`).toMatch(/script-src 'self' 'nonce-[^']+' 'wasm-unsafe-eval'/);
    expect(csp, `${path} CSP`).toContain("frame-ancestors 'none'");
    expect(csp, `${path} CSP`).not.toContain('unsafe-inline');
    expect(headers['x-content-type-options'], path).toBe('nosniff');
    expect(headers['referrer-policy'], path).toBe('same-origin');
    await expect(page.locator('body[data-hydrated="true"]'), path).toHaveCount(1, { timeout: 15_000 });
  };
  for (const path of ['/overview', '/deliveries', '/dead', '/sources', '/audit']) {
    await visit(path);
  }
  // A record with streamed data, reached by client-side navigation too.
  await visit(`/deliveries?key=${id}`);
  await page.getByTestId('deliveries-table').getByRole('link', { name: id }).first().click();
  await expect(page.getByTestId('event-facts')).toBeVisible();
  await page.reload();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });

  // Nonces differ between responses: a stolen one is worth nothing.
  const a = (await request.get('/login')).headers()['content-security-policy'];
  const b = (await request.get('/login')).headers()['content-security-policy'];
  expect(a).not.toEqual(b);
  expect(violations).toEqual([]);
});
