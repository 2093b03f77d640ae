// Loads the web example's page in Debian's headless Chromium (Playwright drives it), waits
// for the streamed run to finish, and prints what the page shows as one JSON line; with a
// second argument, also a screenshot there. CommonJS, so NODE_PATH finds playwright-core. Used by tests/tests/integration/web_bridges.rs.
const { chromium } = require("playwright-core");

async function main() {
const [url, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction(
    () => ["done", "cancelled"].includes(document.getElementById("status").textContent)
      || document.getElementById("status").textContent.startsWith("failed"),
    null,
    { timeout: 60000 },
  );
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  const shown = await page.evaluate(() => ({
    status: document.getElementById("status").textContent,
    text: document.getElementById("text").textContent,
    reasoning: document.getElementById("reasoning").textContent,
    interrupts: document.querySelectorAll(".interrupt").length,
    tools: [...document.querySelectorAll("#tools li")].map((li) => ({
      id: li.dataset.toolCallId,
      name: li.querySelector(".name").textContent,
      args: li.querySelector(".args").textContent,
      result: li.querySelector(".result").textContent,
    })),
  }));
  console.log(JSON.stringify(shown));
} finally {
  await browser.close();
}
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
