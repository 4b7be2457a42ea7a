"""The inspector's layout holds at 800 px and 1400 px with three flows: nothing spills past the page or
its panel, and the whole flow diagram is on screen (docs/guide/cli.md, inspect). Checked in a real
headless browser, with a screenshot of each width kept beside the test's temporary files."""
import base64

import pytest

from test_cli_inspect_browser import CHROMIUM, inspector, page, texts  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")

SPILLS = """(() => {
  const out = [];
  const root = document.documentElement;
  if (root.scrollWidth > window.innerWidth + 1) out.push("page " + root.scrollWidth + " > " + window.innerWidth);
  for (const id of ["runs", "pending", "outcomes", "phases", "diff"]) {
    const table = document.getElementById(id), box = table.closest("section");
    if (table.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
      out.push(id + " " + table.getBoundingClientRect().right + " > " + box.getBoundingClientRect().right);
  }
  const svg = document.getElementById("flowsvg"), frame = document.getElementById("diagram");
  if (svg.getBoundingClientRect().right > frame.getBoundingClientRect().right + 1)
    out.push("diagram " + svg.getBoundingClientRect().right + " > " + frame.getBoundingClientRect().right);
  return out;
})()"""


@pytest.mark.parametrize("width", [800, 1400])
def test_three_flows_fit_at_the_width(page, width, tmp_path):  # noqa: F811
    page.send("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)
    page.evaluate("document.getElementById('message').focus()")
    page.type("where is my order?")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Sure: what is the order number?')")
    page.evaluate("document.getElementById('message').focus()")
    page.type("A100")
    page.wait_for(f"{texts('#transcript .bot')}.includes('Order A100 is out for delivery.')")
    flows = page.evaluate("[...document.querySelectorAll('#flowsvg text[font-weight=bold]')].map(e => e.textContent)")
    assert len(flows) == 3, flows
    shot = page.send("Page.captureScreenshot", format="png")
    (tmp_path / f"inspect-{width}.png").write_bytes(base64.b64decode(shot["data"]))
    assert page.evaluate(SPILLS) == []
