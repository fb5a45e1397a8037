"""The course website, built and opened in a real browser (headless Debian chromium, driven by Playwright).

The module builds a representative part of the site once: every page, but only notebooks 01, 04 and 06
executed (the whole site, all seven notebooks run, takes about two minutes on these 2 busy cores). Then it
checks what a reader would see: every page loads without a console error or a request leaving site/; the
mathematics of the layer pages and of the notebook pages is rendered by KaTeX (no raw `\\frac` or `$$` left); each
notebook page shows its figures; every internal link and anchor resolves; the errata link the cells that prove
them; search finds "LayerNorm"; the code shown is the code in the package, forward above backward.

Installs nothing. It skips, naming what is missing, without the [docs] extra (pip install -e ".[docs]"),
Debian's chromium (apt-get install chromium) or docs/node_modules (npm ci --prefix docs).
"""

import html.parser
import importlib.util
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
CHROMIUM = pathlib.Path("/usr/bin/chromium")
# the front page links 01 and 04; the errata page links the cells of 06
NOTEBOOKS = ("01_attention_worked_example", "04_backprop_by_hand", "06_errata")
LAYER_ROOMS = ("layers", "variants")
MATHS_PAGES = ("layers/layernorm.html", "layers/attention.html", "layers/softmax.html")


def _missing():
    """What this test needs and does not have, in words that say how to get it."""
    modules = ("mkdocs", "material", "mkdocs_jupyter", "mkdocstrings_handlers.python", "nbclient", "ipykernel",
               "playwright")
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"{name} (the [docs] extra: pip install -e \".[docs]\")")
    if not CHROMIUM.is_file():
        missing.append("/usr/bin/chromium (apt-get install chromium)")
    for name in ("katex/dist/katex.min.js", "iframe-worker/shim/index.js"):       # docs/package.json
        if not (REPO / "docs" / "node_modules" / name).is_file():
            missing.append(f"docs/node_modules/{name} (npm ci --prefix docs)")
    return missing


pytestmark = [pytest.mark.site,
              pytest.mark.skipif(bool(_missing()), reason="the site test needs " + "; ".join(_missing()))]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A representative build: every page, notebook 01 executed. Returns the site's folder."""
    build = tmp_path_factory.mktemp("site-build")
    subprocess.run([sys.executable, str(REPO / "docs" / "gen_site.py"), "--out", str(build / "src"),
                    "--site-dir", str(build / "site"), "--notebooks", *NOTEBOOKS], check=True, cwd=REPO)
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(build / "src" / "mkdocs.yml")],
                   check=True, cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return build / "site"


def _pages(site):
    return sorted(path for path in site.rglob("*.html") if path.name != "404.html" and "assets" not in path.parts)


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless, with a fresh profile: one page (tab) for the module."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            "", executable_path=str(CHROMIUM), headless=True, viewport={"width": 1280, "height": 900},
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"])
        yield context.new_page()
        context.close()


class Visit:
    """Open a page and record its console errors, uncaught exceptions and requests that leave site/."""

    def __init__(self, page):
        self.page, self.problems = page, []
        page.on("console", lambda message: message.type == "error" and self.problems.append(
            f"console error: {message.text}"))
        page.on("pageerror", lambda error: self.problems.append(f"uncaught: {error}"))
        page.on("request", lambda request: request.url.startswith(("file:", "data:", "blob:", "about:"))
                or self.problems.append(f"request outside site/: {request.url}"))

    def open(self, path):
        self.problems.clear()
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")
        self.page.wait_for_timeout(50)       # let the page's scripts (KaTeX, search) run
        return self.page


@pytest.fixture(scope="module")
def visit(browser):
    return Visit(browser)


def test_every_layer_variant_and_notebook_has_its_page(site):
    for room in LAYER_ROOMS:
        for path in (REPO / "minitransformer" / room).glob("*.py"):
            if not path.name.startswith("_"):
                assert (site / room / f"{path.stem}.html").is_file(), f"no page for {room}/{path.name}"
    for name in NOTEBOOKS:
        assert (site / "notebooks" / f"{name}.html").is_file(), f"no page for notebook {name}"
    for path in (REPO / "docs" / "guide").glob("*.md"):          # the guide: one page per file, as in the repository
        assert (site / "guide" / f"{path.stem}.html").is_file(), f"no page for docs/guide/{path.name}"
    for page in ("index.html", "errata/index.html", "benchmarks.html", "guide/for-instructors.html",
                 "reference/index.html", "reference/training.html"):
        assert (site / page).is_file(), f"no {page}"


def test_every_page_loads_without_console_errors_or_outside_requests(site, visit):
    pages = _pages(site)
    assert len(pages) > 50
    failures = []
    for path in pages:
        visit.open(path)
        failures += [f"{path.relative_to(site)}: {problem}" for problem in visit.problems]
    assert not failures, "\n".join(failures)


def test_layer_pages_show_rendered_mathematics_and_no_raw_tex(site, visit):
    for room in LAYER_ROOMS:
        for path in sorted((site / room).glob("*.html")):
            page = visit.open(path)
            text = page.inner_text("article")
            for raw in ("$$", "\\frac", "\\begin", "\\(", "\\["):
                assert raw not in text, f"{path.relative_to(site)} shows raw TeX {raw!r}"
            assert page.locator(".katex-error").count() == 0, f"{path.relative_to(site)}: KaTeX could not parse"
    for name in MATHS_PAGES:
        page = visit.open(site / name)
        assert page.locator(".katex-display").count() >= 2, f"{name}: expected displayed formulas"


# the prose of the notebook pages' markdown cells, without rendered formulas and code: where raw TeX would show
_PROSE = """cells => cells.map(cell => { const copy = cell.cloneNode(true);
    copy.querySelectorAll(".katex, code, pre").forEach(element => element.remove()); return copy.innerText; })"""


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_page_shows_rendered_mathematics_and_no_raw_tex(site, visit, name):
    from test_notebooks_math import RAW_TEX

    page = visit.open(site / "notebooks" / f"{name}.html")
    assert page.locator(".jp-MarkdownOutput .katex").count() >= 3, f"{name}: its formulas are not rendered"
    assert page.locator(".katex-error").count() == 0, f"{name}: KaTeX could not parse a formula"
    for index, prose in enumerate(page.eval_on_selector_all(".jp-MarkdownOutput", _PROSE)):
        left = RAW_TEX.findall(prose) + [raw for raw in ("$$", "\\(", "\\[") if raw in prose]
        assert not left, f"{name}: markdown cell {index} of the page shows raw TeX {left}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_page_shows_its_figures(site, visit, name):
    executed = json.loads((site.parent / "src" / "pages" / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    figures = sum(1 for cell in executed["cells"] for output in cell.get("outputs", [])
                  if "image/png" in output.get("data", {}))
    assert figures >= 1, f"{name} made no figure when executed"
    page = visit.open(site / "notebooks" / f"{name}.html")
    sizes = page.eval_on_selector_all(".jp-OutputArea-output img", "images => images.map(i => i.naturalWidth)")
    assert len(sizes) == figures, f"the page shows {len(sizes)} figures, the notebook made {figures}"
    assert all(width > 100 for width in sizes), f"a figure did not load: widths {sizes}"


class _LinksAndIds(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag in ("a", "link") and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag in ("script", "img") and attrs.get("src"):
            self.links.append(attrs["src"])


def _parse(path):
    parser = _LinksAndIds()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_every_internal_link_and_anchor_resolves(site):
    parsed = {path: _parse(path) for path in _pages(site)}
    broken = []
    for path, parser in parsed.items():
        for link in parser.links:
            target = urllib.parse.urlsplit(link)
            if target.scheme or link.startswith("//"):
                continue             # external: not followed (and not loaded, by the console test)
            file = (path.parent / urllib.parse.unquote(target.path)).resolve() if target.path else path
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file():
                broken.append(f"{path.relative_to(site)}: {link} (no such file)")
            elif target.fragment and file.suffix == ".html":
                ids = parsed[file].ids if file in parsed else _parse(file).ids
                if urllib.parse.unquote(target.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_search_finds_layernorm(site, visit):
    page = visit.open(site / "index.html")
    page.click("label.md-search__icon, .md-search__input", timeout=5000)
    page.locator(".md-search__input").press_sequentially("LayerNorm", delay=30)     # typed, as a reader does
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    results = page.eval_on_selector_all(".md-search-result__item a", "links => links.map(a => a.href)")
    found = {urllib.parse.urlsplit(link).path.removeprefix(site.as_uri().removeprefix("file://")) for link in results}
    assert "/layers/layernorm.html" in found, f"search for LayerNorm did not find its page, only {sorted(found)}"


def test_layernorm_page_shows_the_package_code_forward_above_backward(site, visit):
    from minitransformer.layers.layernorm import LayerNorm
    page = visit.open(site / "layers" / "layernorm.html")
    blocks = page.eval_on_selector_all(".highlight code", "codes => codes.map(c => c.innerText)")
    for name in ("forward", "backward"):
        last_line = inspect.getsource(getattr(LayerNorm, name)).rstrip().splitlines()[-1].strip()
        assert any(last_line in block for block in blocks), f"LayerNorm.{name}'s code is not on its page"
    text = page.inner_text("article")
    assert text.index("Forward") < text.index("Backward")
    assert re.search(r"self\.xhat = centered \* self\.rstd", text)


def test_errata_page_has_one_section_per_mistake_linking_the_cell_that_proves_it(site):
    source = (REPO / "notebooks" / "_src" / "06_errata.py").read_text(encoding="utf-8")
    mistakes = re.findall(r"^# ## (E\d+)\.", source, flags=re.M)
    errata = _parse(site / "errata" / "index.html")
    proofs = [link for link in errata.links if link.startswith("../notebooks/06_errata.html#")]
    assert len(mistakes) >= 13 and len(proofs) == len(mistakes), (mistakes, proofs)
    # the anchors themselves are checked by test_every_internal_link_and_anchor_resolves
