"""The playground page at ``/``, driven in a real headless browser (Debian's chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest

from manyheads import Bundle

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick


@pytest.fixture(scope="module")
def served(tmp_path_factory, debian_rows, start_server):
    folder = tmp_path_factory.mktemp("playground") / "b"
    b = Bundle(trunk="hashing", cache=None)
    rows = debian_rows[:400]
    texts = [r["text"] for r in rows]
    b.fit_head("section", texts, [r["section"] for r in rows])
    b.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    b.save(folder)
    return start_server(folder), b


def _answers(driver) -> dict[str, str]:
    """``{head: shown answer}`` of the rendered result cards ({} while they are redrawn)."""
    try:
        cards = driver.find_elements(By.CSS_SELECTOR, "#results .head")
        return {
            c.get_attribute("data-head"): c.find_element(By.CLASS_NAME, "answer").text
            for c in cards
        }
    except StaleElementReferenceException:
        return {}


def test_type_a_text_click_and_read_every_heads_answer(browser, served, debian_test_rows):
    srv, bundle = served
    wait = WebDriverWait(browser, 20)
    browser.get(srv.url + "/")
    # the heads table lists every head with its metrics
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#heads tbody tr[data-head]")) == 3)
    rows = browser.find_elements(By.CSS_SELECTOR, "#heads tbody tr[data-head]")
    assert {r.get_attribute("data-head") for r in rows} == {"section", "library", "role"}
    section = next(r for r in rows if r.get_attribute("data-head") == "section")
    acc = bundle.head_info["section"]["metrics"]["accuracy"]
    assert f"{acc:.3f}" in section.text

    for row in debian_test_rows[:2]:
        text = row["text"]
        box = browser.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)
        browser.find_element(By.ID, "predict").click()
        want = bundle.predict([text])[0]
        wait.until(lambda d, w=want: _answers(d).get("section") == str(w["section"]["label"]))
        answers = _answers(browser)
        assert set(answers) == {"section", "library", "role"}
        assert answers["library"] == str(want["library"]["label"])
        assert answers["role"] == (", ".join(want["role"]["labels"]) or "(no label)")
        # score bars: the chosen label's bar is marked and as wide as its score
        bar = browser.find_element(
            By.CSS_SELECTOR, '#results .head[data-head="section"] .bar.chosen'
        )
        assert bar.get_attribute("data-label") == str(want["section"]["label"])
        width = bar.find_element(By.CLASS_NAME, "bar-fill").value_of_css_property("width")
        track = bar.find_element(By.CLASS_NAME, "bar-track").value_of_css_property("width")
        ratio = float(width.removesuffix("px")) / float(track.removesuffix("px"))
        assert ratio == pytest.approx(want["section"]["score"], abs=0.02)


def test_an_empty_text_shows_an_error(browser, served):
    srv, _ = served
    browser.get(srv.url + "/")
    browser.find_element(By.ID, "text").clear()
    browser.find_element(By.ID, "predict").click()
    err = WebDriverWait(browser, 10).until(EC.visibility_of_element_located((By.ID, "error")))
    assert "text" in err.text.lower()


def test_page_is_a_static_file_in_the_package():
    import manyheads.serve

    page = Path(manyheads.serve.__file__).with_name("playground.html")
    assert page.is_file() and "<script>" in page.read_text()
