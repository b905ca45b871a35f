// onejob's dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser download). Run by `cargo test` (crates/onejob/tests/api/ui.rs),
// which starts onejob with a decided hedge race and an unknown attempt and passes:
//   ONEJOB_URL              the server's base URL (http://127.0.0.1:PORT)
//   ONEJOB_KEY              an operator API key that owns the jobs below
//   ONEJOB_RACE_JOB         a job whose hedge won and whose primary's answer was discarded
//   ONEJOB_UNKNOWN_JOB      a job with one attempt in state unknown ...
//   ONEJOB_UNKNOWN_ATTEMPT  ... this one
//   ONEJOB_ARTIFACTS        where to save screenshots (default ../target/ui-artifacts)
//   ONEJOB_CHROMIUM         the browser (default /usr/bin/chromium)
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; this test is run by cargo test (tests/api/ui.rs)`);
  return value;
}

const base = required("ONEJOB_URL").replace(/\/$/, "");
const key = required("ONEJOB_KEY");
const raceJob = required("ONEJOB_RACE_JOB");
const unknownJob = required("ONEJOB_UNKNOWN_JOB");
const unknownAttempt = required("ONEJOB_UNKNOWN_ATTEMPT");
const here = dirname(fileURLToPath(import.meta.url));
const artifacts = process.env.ONEJOB_ARTIFACTS || join(here, "..", "target", "ui-artifacts");
const executablePath = process.env.ONEJOB_CHROMIUM || "/usr/bin/chromium";

let context;
let page;
let profile;

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  profile = mkdtempSync(join(tmpdir(), "onejob-e2e-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1200, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

/** Clicks `selector` and waits for the page it loads; returns that page's response. */
async function submitAndWait(selector) {
  const [response] = await Promise.all([
    page.waitForNavigation({ waitUntil: "load" }),
    page.locator(selector).click(),
  ]);
  return response;
}

/** The timeline's bars as the browser renders them. */
async function bars() {
  return page.$$eval("svg#timeline g.bar", (groups) =>
    groups.map((g) => {
      const rect = g.querySelector("rect");
      const style = getComputedStyle(rect);
      return {
        attempt: g.dataset.attempt,
        state: g.dataset.state,
        winner: g.dataset.winner === "true",
        hedge: g.dataset.hedge === "true",
        label: g.querySelector("text.label").textContent,
        fill: style.fill,
        stroke: style.stroke,
        dash: style.strokeDasharray,
        width: rect.getBBox().width,
      };
    }),
  );
}

describe("the onejob dashboard", () => {
  it("sends a visitor without a cookie to the sign-in form", async () => {
    await page.goto(`${base}/ui`);
    assert.equal(new URL(page.url()).pathname, "/ui/login");
  });

  it("refuses a wrong key with an error", async () => {
    await page.fill("#key", "oj_0000000000000000_" + "0".repeat(64));
    const response = await submitAndWait("form button[type=submit]");
    assert.equal(response.status(), 401);
    assert.match(await page.textContent("#login-error"), /not valid/);
    await page.screenshot({ path: join(artifacts, "login-refused.png") });
  });

  it("signs in with the key and keeps it in an HttpOnly, SameSite=Strict cookie on /ui", async () => {
    await page.fill("#key", key);
    await submitAndWait("form button[type=submit]");
    assert.equal(new URL(page.url()).pathname, "/ui/jobs");
    const [cookie] = (await context.cookies(`${base}/ui/jobs`)).filter((c) => c.name === "onejob_ui");
    assert.ok(cookie, "the sign-in cookie is set");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    assert.equal(cookie.path, "/ui");
    assert.equal(cookie.secure, false, "plain http to a loopback address");
    assert.doesNotMatch(await page.evaluate(() => document.cookie), /onejob_ui/);
  });

  it("lists the jobs and filters them by state", async () => {
    for (const id of [raceJob, unknownJob]) {
      assert.equal(await page.locator(`tr[data-job="${id}"]`).count(), 1, `job ${id} is listed`);
    }
    await page.screenshot({ path: join(artifacts, "jobs.png") });
    await page.selectOption('select[name="state"]', "unknown");
    await submitAndWait("form.filters button");
    assert.equal(new URL(page.url()).searchParams.get("state"), "unknown");
    assert.equal(await page.locator(`tr[data-job="${unknownJob}"]`).count(), 1);
    assert.equal(await page.locator(`tr[data-job="${raceJob}"]`).count(), 0);
    await page.goto(`${base}/ui/jobs`);
  });

  it("draws the race on the job page: the hedge won, the primary's answer discarded", async () => {
    await submitAndWait(`a[href="/ui/jobs/${raceJob}"]`);
    assert.equal(await page.textContent("#job-state"), "succeeded");
    const drawn = await bars();
    assert.equal(drawn.length, 2, JSON.stringify(drawn));
    const [loser, winner] = drawn;
    assert.equal(winner.state, "succeeded");
    assert.ok(winner.winner && winner.hedge, JSON.stringify(winner));
    assert.match(winner.label, /^★ #2 fake-backup · succeeded \(winner\) · hedge/);
    assert.equal(loser.state, "discarded");
    assert.ok(!loser.winner, JSON.stringify(loser));
    assert.match(loser.label, /^#1 fake · discarded/);
    assert.match(loser.fill, /url\(.*#hatch/, "the discarded bar is hatched");
    assert.notEqual(loser.fill, winner.fill);
    assert.notEqual(loser.stroke, winner.stroke);
    assert.ok(loser.width > winner.width, "the late primary ran longer than the hedge");
    assert.equal(await page.locator('#events tr[data-kind="race_lost"]').count(), 1);
    assert.match(await page.textContent("#result"), /backup, early/);
    await page.screenshot({ path: join(artifacts, "job-page.png"), fullPage: true });
    await page.locator("figure.timeline").screenshot({ path: join(artifacts, "timeline.png") });
  });

  it("shows the unknown attempt dashed and amber on its job page", async () => {
    await page.goto(`${base}/ui/jobs/${unknownJob}`);
    const [bar] = await bars();
    assert.equal(bar.attempt, unknownAttempt);
    assert.equal(bar.state, "unknown");
    assert.notEqual(bar.dash, "none", "the unknown bar is dashed");
    assert.match(bar.label, /so far$/, "a live bar runs to now");
    await page.screenshot({ path: join(artifacts, "job-unknown.png"), fullPage: true });
  });

  it("lists the race among the recent races", async () => {
    await submitAndWait('header nav a[href="/ui/races"]');
    assert.equal(await page.locator(`tr[data-job="${raceJob}"] a[href="/ui/jobs/${raceJob}"]`).count(), 1);
  });

  it("shows every certificate run with its validity", async () => {
    await submitAndWait('header nav a[href="/ui/certificates"]');
    assert.ok((await page.locator('tr[data-valid="true"]').count()) >= 1);
  });

  it("refuses a result that fails the kind's output schema and keeps the attempt queued", async () => {
    await submitAndWait('header nav a[href="/ui/unknown"]');
    const card = page.locator(`#attempt-${unknownAttempt}`);
    assert.equal(await card.count(), 1);
    assert.ok(await card.locator("textarea").isHidden(), "no result field for a failure");
    await card.locator('input[value="succeeded"]').check();
    assert.ok(await card.locator("textarea").isVisible(), "a success carries a result");
    await card.locator("textarea").fill('{"nope": 1}');
    const response = await submitAndWait(`#attempt-${unknownAttempt} form.resolve button`);
    assert.equal(response.status(), 400);
    const notice = page.locator("#notice.refused");
    assert.match(await notice.textContent(), /was not resolved/);
    assert.match(await notice.locator("ul.errors").textContent(), /text/);
    assert.equal(await page.locator(`#attempt-${unknownAttempt}`).count(), 1, "still queued");
    await page.screenshot({ path: join(artifacts, "unknown-refused.png"), fullPage: true });
  });

  it("resolves the unknown attempt as succeeded and shows what it did", async () => {
    const card = page.locator(`#attempt-${unknownAttempt}`);
    assert.ok(await card.locator('input[value="succeeded"]').isChecked(), "the form kept the choice");
    await card.locator("textarea").fill('{"text": "resolved from the dashboard"}');
    await card.locator('input[name="reason"]').fill("seen in the provider's console");
    const response = await submitAndWait(`#attempt-${unknownAttempt} form.resolve button`);
    assert.equal(response.status(), 200);
    assert.match(
      await page.textContent("#notice.done"),
      /resolved as succeeded: won; the job is now succeeded/,
    );
    assert.ok(await page.locator("#queue-empty").isVisible(), "the queue is empty");
    await page.screenshot({ path: join(artifacts, "unknown-resolved.png"), fullPage: true });

    await submitAndWait("#notice a");
    assert.equal(new URL(page.url()).pathname, `/ui/jobs/${unknownJob}`);
    assert.equal(await page.textContent("#job-state"), "succeeded");
    assert.match(await page.textContent("#result"), /resolved from the dashboard/);
    const [bar] = await bars();
    assert.ok(bar.winner && bar.state === "succeeded", JSON.stringify(bar));
    assert.match(bar.label, /^★ #1 fake · succeeded \(winner\)/);
    const won = page.locator('#events tr[data-kind="won"]');
    assert.match(await won.textContent(), /key:[0-9a-f]{16}/, "the event names the operator");
    await page.screenshot({ path: join(artifacts, "job-resolved.png"), fullPage: true });
  });

  it("signs out, after which pages send it back to the sign-in form", async () => {
    await submitAndWait("header form button");
    assert.equal(new URL(page.url()).pathname, "/ui/login");
    assert.equal((await context.cookies(`${base}/ui/jobs`)).filter((c) => c.name === "onejob_ui").length, 0);
    await page.goto(`${base}/ui/jobs/${raceJob}`);
    assert.equal(new URL(page.url()).pathname, "/ui/login");
  });
});
