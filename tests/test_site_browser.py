"""The website as readers meet it: every built page opened in a real browser.

Debian's Chromium, headless, driven by Playwright, opens each page of the session's build
(the ``book_build`` fixture, never a second build) from a static server on 127.0.0.1. Any
request to another address is blocked and fails the page, so these checks also prove that
the site works offline. Each page is visited once, on first demand; the checks then read
what that visit saw, one test per check and page, so a failure names both.

Chromium comes from the system (``apt-get install chromium``), not from Playwright's
browser download. Without it the tests are skipped, or fail when the environment
variable CI is set. Screenshots go to ``<build>/screenshots/`` (printed at the end).
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import re
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

import pytest
from bs4 import BeautifulSoup

from built_site import CHAPTERS, NOTEBOOKS, PAGES, REDIRECT, Page, page_id
from chapters import ROOT, part_chapters

if TYPE_CHECKING:
    from conftest import BookBuild
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Request, Response, Route, ViewportSize
    from playwright.sync_api import Page as Tab

pytestmark = [pytest.mark.build, pytest.mark.browser]

INSTALL_CHROMIUM = (
    "Chromium is not installed, so the website cannot be tested in a browser. "
    "Install Debian's Chromium with `sudo apt-get install chromium` (.ci/run does it), "
    "or point the CHROMIUM environment variable at a Chromium or Chrome binary."
)
CHROMIUM_NAMES = ("chromium", "chromium-browser")
#: Headless, offline and throw-away (Playwright gives each launch a fresh --user-data-dir).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ["serious", "critical"]
#: Requests the browser may make: to the test's server, or to nothing (files, inline data).
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
LOCAL_SCHEMES = {"data", "blob", "about", "file"}
#: The URLs the guard intercepts: everything but loopback and local files.
OUTSIDE_URL = re.compile(r"^(?!file:|data:|blob:|about:)(?!(?:https?|wss?)://(?:127\.0\.0\.1|localhost|\[::1\])[:/])")
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
TIMEOUT_MS = 30_000
SEARCH_TIMEOUT_MS = 10_000
#: In dark mode, the ring just inside each figure's image must be at least this light (0 black,
#: 1 white): the figure brings its own light background, or the theme gives it one.
MIN_FIGURE_BACKGROUND = 0.6
#: And the page around it must really be dark, or the check would prove nothing.
MAX_DARK_PAGE_BACKGROUND = 0.2


# ---------------------------------------------------------------------------------------------
# The browser and the server


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI: a CI run must not pass without having looked at the site."""
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def find_chromium() -> str | None:
    chosen = os.environ.get("CHROMIUM")
    if chosen:
        return chosen if Path(chosen).is_file() else shutil.which(chosen)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = find_chromium()
    if executable is None:
        unavailable(INSTALL_CHROMIUM)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed: `make test` installs requirements.txt into .venv")
    if not AXE.is_file():
        unavailable(f"axe-core is not installed ({AXE} is missing): run `npm ci` (`make test` does it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        yield chromium
        chromium.close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that leaves a page mid-download is no error of the site."""


@pytest.fixture(scope="module")
def site_url(book_build: BookBuild) -> Iterator[str]:
    """The built site, served from 127.0.0.1 on a free port, as any static host serves it."""
    if not (book_build.html / "index.html").is_file():
        pytest.fail(f"the book did not build into {book_build.html} (see test_build)", pytrace=False)
    handler = functools.partial(QuietHandler, directory=str(book_build.html))
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@dataclass
class Network:
    """What a page did on the network: console errors, requests to elsewhere (blocked), failed loads."""

    console_errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return self.console_errors + [f"blocked: {url}" for url in self.outside_requests] + self.failed_requests

    def take(self) -> Network:
        """What was recorded so far, which is then forgotten: the next page starts clean."""
        taken = Network(self.console_errors[:], self.outside_requests[:], self.failed_requests[:])
        for records in (self.console_errors, self.outside_requests, self.failed_requests):
            records.clear()
        return taken


def stays_on_machine(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or parts.hostname in LOOPBACK_HOSTS


def open_tab(browser: Browser, network: Network) -> tuple[BrowserContext, Tab]:
    """A tab in a fresh context that records console errors and failed loads, and blocks and
    records every request leaving the machine."""
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light", service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)

    def guard(route: Route) -> None:
        if stays_on_machine(route.request.url):
            route.continue_()
        else:
            network.outside_requests.append(f"{route.request.resource_type} {route.request.url}")
            route.abort("blockedbyclient")

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            location = message.location or {}
            network.console_errors.append(
                f"{message.text} (at {location.get('url', '?')}:{location.get('lineNumber', '?')})"
            )

    def on_response(response: Response) -> None:
        if response.status >= 400:
            network.failed_requests.append(f"HTTP {response.status} {response.url}")

    def on_failure(request: Request) -> None:
        # The guard reports requests leaving the machine. ERR_ABORTED is the browser cancelling a
        # request because the tab moved on (a missing file shows as HTTP 404 above instead).
        if stays_on_machine(request.url) and request.failure != "net::ERR_ABORTED":
            network.failed_requests.append(f"{request.failure} {request.url}")

    context.route(OUTSIDE_URL, guard)
    tab = context.new_page()
    tab.on("console", on_console)
    tab.on("pageerror", lambda error: network.console_errors.append(f"uncaught exception: {error}"))
    tab.on("response", on_response)
    tab.on("requestfailed", on_failure)
    return context, tab


# ---------------------------------------------------------------------------------------------
# What a visit reads from a page (JavaScript run in the page)

#: Resolves once MathJax has typeset the page, web fonts are in and every image is decoded.
WAIT_FOR_RENDERING = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  await Promise.all(Array.from(document.images, image => image.decode().catch(() => null)));
}"""

IMAGES = """() => Array.from(document.images, image => ({
  src: image.getAttribute('src'), complete: image.complete,
  width: image.naturalWidth, height: image.naturalHeight,
}))"""

#: Math as Sphinx writes it (class "math") must hold a MathJax container, and no TeX may be left
#: in the text outside code.
MATH = r"""() => {
  const article = document.querySelector('article.bd-article') || document.body;
  const unrendered = Array.from(article.querySelectorAll('.math'))
    .filter(element => !element.querySelector('mjx-container'))
    .map(element => element.textContent.trim().slice(0, 80));
  const errors = Array.from(article.querySelectorAll('mjx-merror'),
    error => error.getAttribute('data-mjx-error') || error.textContent.slice(0, 80));
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, textarea, mjx-container').forEach(element => element.remove());
  const raw = (prose.textContent.match(/.{0,30}(\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{).{0,30}/g) || []).slice(0, 5);
  return {
    formulas: article.querySelectorAll('.math').length,
    containers: article.querySelectorAll('mjx-container').length,
    unrendered, errors, raw,
    version: (window.MathJax && window.MathJax.version) || null,
    script: (document.querySelector('script[src*="mathjax"]') || {}).src || null,
  };
}"""

#: Figures (a glued figure is a <figure> holding an <img>) and what myst-nb or docutils leave
#: where something failed to render: system messages, "problematic" nodes, raw glue roles.
FIGURES = r"""() => {
  const article = document.querySelector('article.bd-article') || document.body;
  const figures = Array.from(article.querySelectorAll('figure'));
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style').forEach(element => element.remove());
  return {
    figures: figures.length,
    withImage: figures.filter(figure => figure.querySelector('img')).length,
    problems: Array.from(article.querySelectorAll('.system-message, .problematic'),
      element => element.textContent.trim().slice(0, 120))
      .concat(prose.textContent.match(/.{0,40}(\{glue(:\w+)?\}|glue data).{0,40}/g) || []),
  };
}"""

AXE_RUN = """async (impacts) => {
  const results = await axe.run(document, {resultTypes: ['violations']});
  return results.violations.filter(violation => impacts.includes(violation.impact)).map(violation => ({
    id: violation.id, impact: violation.impact, help: violation.help, count: violation.nodes.length,
    nodes: violation.nodes.slice(0, 3).map(node => node.target.join(' ') + ': ' + node.failureSummary.replace(/\\s+/g, ' ')),
  }));
}"""

#: Scroll the i-th figure to the middle of the window; its box and its image's box, in window
#: coordinates, and whether the sticky header covers it (then a full-page clip is taken instead).
SHOW_FIGURE = """(index) => {
  const figure = document.querySelectorAll('article.bd-article figure')[index];
  figure.scrollIntoView({block: 'center'});
  const box = rect => ({x: rect.left, y: rect.top, width: rect.width, height: rect.height});
  const image = figure.querySelector('img');
  const header = document.querySelector('.bd-header');
  const covered = header ? figure.getBoundingClientRect().top < header.getBoundingClientRect().bottom : false;
  return {name: figure.id || `figure-${index + 1}`, figure: box(figure.getBoundingClientRect()),
          image: image ? box(image.getBoundingClientRect()) : null, covered,
          scrollX: window.scrollX, scrollY: window.scrollY};
}"""


def relative_luminance(css_colour: str) -> float:
    """WCAG relative luminance of a CSS ``rgb()``/``rgba()`` colour."""
    channels = [float(value) / 255 for value in re.findall(r"[\d.]+", css_colour)[:3]]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def border_lightness(screenshot: bytes, box: dict[str, float], inset: int = 3) -> float:
    """Mean lightness (0 black, 1 white) of a thin ring just inside ``box`` of a screenshot: what
    shows where a figure has its own background, or the page's through a transparent one."""
    from PIL import Image, ImageStat  # Pillow comes with matplotlib

    image = Image.open(io.BytesIO(screenshot)).convert("L")
    left, top = round(box["x"]) + inset, round(box["y"]) + inset
    right, bottom = round(box["x"] + box["width"]) - inset, round(box["y"] + box["height"]) - inset
    strips = [
        (left, top, right, top + inset),
        (left, bottom - inset, right, bottom),
        (left, top, left + inset, bottom),
        (right - inset, top, right, bottom),
    ]
    return statistics.fmean(ImageStat.Stat(image.crop(strip)).mean[0] / 255 for strip in strips)


def open_menu(tab: Tab, dropdown: str) -> list[str]:
    """Click one of the article header's dropdown buttons; return the links it shows, then close it."""
    button = tab.locator(f".article-header-buttons .{dropdown} > button")
    if button.count() == 0:
        return []
    button.click()
    links = tab.locator(f".article-header-buttons .{dropdown} .dropdown-menu a")
    links.first.wait_for(state="visible")
    hrefs = [
        links.nth(index).evaluate("link => link.href")
        for index in range(links.count())
        if links.nth(index).is_visible()
    ]
    tab.keyboard.press("Escape")
    return hrefs


# ---------------------------------------------------------------------------------------------
# One visit of a page


@dataclass
class Download:
    status: int
    body: bytes


@dataclass
class Visit:
    """Everything the checks need from one page, gathered in one visit."""

    page: Page
    url: str
    network: Network
    images: list[dict[str, Any]]
    math: dict[str, Any]
    figures: dict[str, Any]
    axe_violations: list[dict[str, Any]]
    menus: dict[str, list[str]] = field(default_factory=dict)  # the links each header dropdown shows
    downloads: dict[str, Download] = field(default_factory=dict)  # each download link, fetched
    screenshot: Path | None = None
    dark_theme: str = ""
    dark_page_background: float = 0.0
    dark_figures: dict[str, float] = field(default_factory=dict)  # figure -> lightness of its border
    dark_screenshots: list[Path] = field(default_factory=list)
    seconds: float = 0.0


class Visitor:
    """Visits each page once, on first demand, and keeps what it saw. One tab visits them all,
    as a reader going from page to page would, so the browser caches what pages share."""

    def __init__(self, browser: Browser, site_url: str, screenshots: Path) -> None:
        self.site_url = site_url
        self.screenshots = screenshots
        self.visits: dict[str, Visit] = {}
        self.failures: dict[str, str] = {}
        self.network = Network()
        self.context, self.tab = open_tab(browser, self.network)

    def __call__(self, page: Page) -> Visit:
        if page.path in self.failures:  # do not wait for a broken page once per check
            pytest.fail(f"{page.path}: the visit failed: {self.failures[page.path]}", pytrace=False)
        if page.path not in self.visits:
            try:
                self.visits[page.path] = self._visit(page)
            except Exception as error:
                self.failures[page.path] = f"{type(error).__name__}: {error}"
                raise
        return self.visits[page.path]

    def close(self) -> None:
        self.context.close()

    def _visit(self, page: Page) -> Visit:
        start = time.perf_counter()
        url = urljoin(self.site_url, page.path)
        tab = self.tab
        tab.emulate_media(color_scheme="light")  # the previous page was left in dark mode
        self.network.take()
        response = tab.goto(url, wait_until="load")
        assert response is not None and response.ok, f"{page.path}: HTTP {response and response.status}"
        tab.evaluate(WAIT_FOR_RENDERING)
        tab.add_script_tag(path=str(AXE))  # injected inline: nothing is fetched
        visit = Visit(
            page=page,
            url=url,
            network=Network(),
            images=tab.evaluate(IMAGES),
            math=tab.evaluate(MATH),
            figures=tab.evaluate(FIGURES),
            axe_violations=tab.evaluate(AXE_RUN, BLOCKING_IMPACTS),
        )
        if page.is_chapter:
            visit.screenshot = self.screenshots / f"{page.name}.png"
            tab.screenshot(path=visit.screenshot, full_page=True)
            for dropdown in ("dropdown-launch-buttons", "dropdown-download-buttons"):
                visit.menus[dropdown] = open_menu(tab, dropdown)
            for link in visit.menus["dropdown-download-buttons"]:
                answer = self.context.request.get(link)  # what a click on the link downloads
                visit.downloads[link] = Download(answer.status, answer.body())
            self._look_in_the_dark(tab, visit)
        visit.network = self.network.take()
        visit.seconds = time.perf_counter() - start
        return visit

    def _look_in_the_dark(self, tab: Tab, visit: Visit) -> None:
        """Switch the reader's system to dark mode, which the theme follows; screenshot each
        figure with its caption and measure the background its image shows."""
        tab.emulate_media(color_scheme="dark")
        tab.wait_for_function("document.documentElement.dataset.theme === 'dark'")
        tab.evaluate(WAIT_FOR_RENDERING)
        visit.dark_theme = tab.evaluate("document.documentElement.dataset.theme")
        visit.dark_page_background = relative_luminance(tab.evaluate("getComputedStyle(document.body).backgroundColor"))
        for index in range(tab.locator("article.bd-article figure").count()):
            shown = tab.evaluate(SHOW_FIGURE, index)
            path = self.screenshots / f"{visit.page.name}-dark-{shown['name']}.png"
            clip, full_page = shown["figure"], False
            if shown["covered"]:  # taller than the window: clip the full page instead
                clip = {**clip, "x": clip["x"] + shown["scrollX"], "y": clip["y"] + shown["scrollY"]}
                full_page = True
            picture = tab.screenshot(path=path, clip=clip, full_page=full_page)
            visit.dark_screenshots.append(path)
            image = shown["image"]
            if image and image["width"] > 10 and image["height"] > 10:
                inside = {**image, "x": image["x"] - shown["figure"]["x"], "y": image["y"] - shown["figure"]["y"]}
                visit.dark_figures[shown["name"]] = border_lightness(picture, inside)
        if not visit.dark_screenshots:  # a page without figures: the top of the page
            path = self.screenshots / f"{visit.page.name}-dark.png"
            tab.evaluate("window.scrollTo(0, 0)")
            tab.screenshot(path=path)
            visit.dark_screenshots.append(path)


@pytest.fixture(scope="module")
def visit(
    browser: Browser, site_url: str, screenshot_dir: Path, site_report: list[str]
) -> Iterator[Callable[[Page], Visit]]:
    visitor = Visitor(browser, site_url, screenshot_dir)
    yield visitor
    visitor.close()
    if visitor.visits:
        seconds = ", ".join(f"{seen.page.name} {seen.seconds:.1f}" for seen in visitor.visits.values())
        total = sum(seen.seconds for seen in visitor.visits.values())
        site_report.append(f"browser: {len(visitor.visits)} pages visited in {total:.1f} s ({seconds})")


def visited(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> Visit:
    if not page.html_file(book_build.html).is_file():
        pytest.fail(f"{page.path} was not built (see test_build for why)", pytrace=False)
    return visit(page)


def listed(items: list[str]) -> str:
    return "".join(f"\n  {item}" for item in items)


# ---------------------------------------------------------------------------------------------
# The checks: one test per check and page


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_console_errors(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    errors = visited(visit, book_build, page).network.console_errors
    assert not errors, f"{page.path}: errors in the browser console:{listed(errors)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_nothing_is_requested_from_outside(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    outside = visited(visit, book_build, page).network.outside_requests
    assert not outside, f"{page.path} needs the network (these requests were blocked):{listed(outside)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_resource_loads(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    failed = visited(visit, book_build, page).network.failed_requests
    assert not failed, f"{page.path}: resources that did not load:{listed(failed)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_image_loads(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    images = visited(visit, book_build, page).images
    broken = [
        f"{image['src']} (complete: {image['complete']}, natural size {image['width']}x{image['height']})"
        for image in images
        if not (image["complete"] and image["width"] > 0 and image["height"] > 0)
    ]
    assert not broken, f"{page.path}: images that did not load:{listed(broken)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_math_is_rendered(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    math = visited(visit, book_build, page).math
    if math["formulas"]:
        assert (math["version"] or "").startswith("3."), (
            f"{page.path}: MathJax 3 did not start (script {math['script']}, version {math['version']})"
        )
        assert math["script"] and stays_on_machine(math["script"]), (
            f"{page.path}: MathJax is loaded from {math['script']}"
        )
    assert not math["unrendered"], f"{page.path}: formulas MathJax did not render:{listed(math['unrendered'])}"
    assert not math["errors"], f"{page.path}: TeX errors in formulas:{listed(math['errors'])}"
    assert not math["raw"], f"{page.path}: TeX delimiters left in the text:{listed(math['raw'])}"
    assert math["containers"] >= math["formulas"], (
        f"{page.path}: {math['formulas']} formulas, {math['containers']} rendered"
    )


@pytest.mark.parametrize("page", CHAPTERS, ids=page_id)
def test_glued_figures_are_present(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    figures = visited(visit, book_build, page).figures
    assert not figures["problems"], f"{page.path}: glue or markup that failed to render:{listed(figures['problems'])}"
    without_image = figures["figures"] - figures["withImage"]
    assert without_image == 0, f"{page.path}: {without_image} of {figures['figures']} figures show no image"
    if page.is_notebook:
        assert figures["withImage"] >= 1, f"{page.path}: a chapter glues at least one figure; this page shows none"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_serious_accessibility_violations(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    violations = visited(visit, book_build, page).axe_violations
    described = [
        f"{violation['id']} ({violation['impact']}, {violation['count']} element(s)): {violation['help']}"
        + "".join(f"\n      {node}" for node in violation["nodes"])
        for violation in violations
    ]
    assert not described, f"{page.path}: axe-core found {' or '.join(BLOCKING_IMPACTS)} violations:{listed(described)}"


@pytest.mark.parametrize("page", NOTEBOOKS, ids=page_id)
def test_colab_link_opens_the_chapters_notebook(
    visit: Callable[[Page], Visit], book_build: BookBuild, page: Page
) -> None:
    links = visited(visit, book_build, page).menus.get("dropdown-launch-buttons", [])
    colab = [link for link in links if "colab.research.google.com" in link]
    expected = [page.colab_url(), page.colab_url(student=True)]  # the instructor's and the student's editions
    assert colab == expected, f"{page.path}: the launch menu shows Colab links {colab}, expected {expected}"


@pytest.mark.parametrize("page", CHAPTERS, ids=page_id)
def test_download_buttons_work(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    """The download menu offers the page's source and, for a chapter that runs, its executed
    notebook; each link answers from the site itself, the notebook as valid JSON."""
    seen = visited(visit, book_build, page)
    site_root = urljoin(seen.url, "/")

    def download(suffix: str) -> bytes:
        links = [link for link in seen.downloads if urlsplit(link).path.endswith(f"/{page.name}{suffix}")]
        assert len(links) == 1, f"{page.path}: expected one {suffix} download in the menu, found {list(seen.downloads)}"
        link = links[0]
        assert link.startswith(site_root), f"{page.path}: the {suffix} download leaves the site: {link}"
        answer = seen.downloads[link]
        assert answer.status == 200 and answer.body.strip(), f"{page.path}: {link} answers HTTP {answer.status}"
        return answer.body

    assert seen.downloads, f"{page.path}: the article header has no download menu"
    download(page.source.suffix if page.source else ".md")
    if page.is_notebook:
        try:
            notebook = json.loads(download(".ipynb"))
        except json.JSONDecodeError as error:
            pytest.fail(f"{page.path}: the downloaded notebook is not valid JSON: {error}", pytrace=False)
        code_cells = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]
        assert notebook.get("nbformat") == 4 and code_cells, f"{page.path}: the downloaded notebook has no code cells"
        assert any(cell.get("outputs") for cell in code_cells), f"{page.path}: the downloaded notebook has no outputs"


@pytest.mark.parametrize("page", CHAPTERS, ids=page_id)
def test_figures_readable_in_dark_mode(visit: Callable[[Page], Visit], book_build: BookBuild, page: Page) -> None:
    seen = visited(visit, book_build, page)
    assert seen.dark_theme == "dark", (
        f"{page.path}: the theme did not follow the system to dark mode ({seen.dark_theme!r})"
    )
    assert seen.dark_page_background <= MAX_DARK_PAGE_BACKGROUND, (
        f"{page.path}: in dark mode the page background has luminance {seen.dark_page_background:.2f}"
    )
    dark = {name: round(value, 2) for name, value in seen.dark_figures.items() if value < MIN_FIGURE_BACKGROUND}
    assert not dark, (
        f"{page.path}: in dark mode these figures show a dark background, where dark ink vanishes "
        f"(lightness under {MIN_FIGURE_BACKGROUND}; see {seen.dark_screenshots}): {dark}"
    )
    expected = seen.figures["withImage"]
    assert len(seen.dark_figures) == expected, f"{page.path}: measured {len(seen.dark_figures)} of {expected} figures"
    assert seen.screenshot is not None and seen.screenshot.is_file(), f"{page.path}: no screenshot saved"
    assert all(path.is_file() for path in seen.dark_screenshots), f"{page.path}: dark screenshots missing"


# ---------------------------------------------------------------------------------------------
# Search, the front page, and the site opened from disk

#: Sphinx's search page says "Search finished, ..." or "Your search did not match ..." when done,
#: then fills in each result's summary from its page, fetched in the background.
SEARCH_DONE = """() => {
  const summary = document.querySelector('#search-results .search-summary');
  if (summary === null || !/finished|did not match/.test(summary.textContent)) return false;
  return Array.from(document.querySelectorAll('#search-results ul.search > li'))
    .every(result => result.querySelector('p.context, span'));
}"""


def search_word(html_file: Path) -> str:
    """A word a reader might search for: the longest word of the chapter's first paragraph."""
    article = BeautifulSoup(html_file.read_text(encoding="utf-8"), "html.parser").select_one("article.bd-article")
    assert article is not None, f"{html_file.name} has no article"
    for paragraph in article.select("p"):
        words: list[str] = re.findall(r"[A-Za-z]{6,}", paragraph.get_text(" "))
        if words:
            return max(words, key=len)
    pytest.fail(f"{html_file.name} has no paragraph with a word to search for", pytrace=False)


@pytest.fixture(scope="module")
def search_tab(browser: Browser, site_url: str) -> Iterator[tuple[Tab, Network]]:
    """One tab for every search, so the search index is loaded once and then cached."""
    network = Network()
    context, tab = open_tab(browser, network)
    yield tab, network
    context.close()


@pytest.mark.parametrize("page", CHAPTERS, ids=page_id)
def test_search_finds_the_chapter(
    search_tab: tuple[Tab, Network], site_url: str, book_build: BookBuild, page: Page
) -> None:
    html_file = page.html_file(book_build.html)
    if not html_file.is_file():
        pytest.fail(f"{page.path} was not built (see test_build for why)", pytrace=False)
    word = search_word(html_file)
    tab, network = search_tab
    before = len(network.problems())
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    tab.goto(urljoin(site_url, f"search.html?q={quote(word)}"), wait_until="load")
    try:
        tab.wait_for_function(SEARCH_DONE, timeout=SEARCH_TIMEOUT_MS)
    except PlaywrightTimeout:
        pytest.fail(
            f"searching for {word!r} never finished:{listed(network.problems()[before:]) or ' no error shown'}",
            pytrace=False,
        )
    found = tab.evaluate("Array.from(document.querySelectorAll('#search-results ul.search li a'), link => link.href)")
    pages = [urlsplit(link).path.removeprefix("/") for link in found]
    assert page.path in pages, f"searching for {word!r} found {pages or 'nothing'}, not {page.path}"
    problems = network.problems()[before:]
    assert not problems, f"searching for {word!r}:{listed(problems)}"


def test_front_page_opens_the_first_chapter(browser: Browser, site_url: str) -> None:
    network = Network()
    context, tab = open_tab(browser, network)
    try:
        tab.goto(urljoin(site_url, REDIRECT.path), wait_until="load")
        tab.wait_for_url(urljoin(site_url, CHAPTERS[0].path))
    finally:
        context.close()
    assert not network.problems(), f"{REDIRECT.path}:{listed(network.problems())}"


def test_the_course_plan_fits_a_laptops_page(browser: Browser, site_url: str) -> None:
    """At 1280 pixels (VIEWPORT), the course plan's table is no wider than the page's text: an
    instructor reads every column without scrolling the table sideways, as the one of eight columns did not."""
    network = Network()
    context, tab = open_tab(browser, network)
    try:
        tab.goto(urljoin(site_url, "book/course-plan.html"), wait_until="load")
        widths = tab.evaluate(
            "() => { const table = document.querySelector('article table');"
            " return [table.scrollWidth, table.parentElement.clientWidth]; }"
        )
    finally:
        context.close()
    table_width, text_width = widths
    assert table_width <= text_width, (
        f"course-plan.html: at {VIEWPORT['width']} pixels its table is {table_width} pixels wide, wider than the "
        f"page's {text_width}: shorten a column in scripts/course_plan.py"
    )


def test_book_reads_from_disk(browser: Browser, book_build: BookBuild) -> None:
    """Opened from the folder itself (file://), with no server, the book shows its math and figures."""
    network = Network()
    context, tab = open_tab(browser, network)
    first = CHAPTERS[0].html_file(book_build.html)
    try:
        tab.goto((book_build.html / REDIRECT.path).as_uri(), wait_until="load")
        tab.wait_for_url(first.as_uri())
        tab.evaluate(WAIT_FOR_RENDERING)
        math, images = tab.evaluate(MATH), tab.evaluate(IMAGES)
    finally:
        context.close()
    broken = [image["src"] for image in images if not image["width"]]
    assert not math["unrendered"] and not math["errors"], f"{first.name} from disk: math not rendered: {math}"
    assert not broken, f"{first.name} from disk: images that did not load:{listed(broken)}"
    assert not network.problems(), f"{first.name} from disk:{listed(network.problems())}"


# ---------------------------------------------------------------------------------------------
# The quiz at the end of a chapter, answered from the keyboard and the mouse, offline

#: The first chapter with a quiz (the quiz helper's tests and test_site_html check the others' markup).
QUIZ_PAGE = next(page for page in CHAPTERS if page.source in part_chapters())
#: What a question's feedback says, the options' or the numeric answer's, as the page's text.
FEEDBACK_TEXT = """(field) => {
  const holder = document.createElement('div');
  holder.innerHTML = field.dataset.feedback;
  return holder.textContent;
}"""
AXE_ON_QUIZZES = """async (impacts) => (await axe.run(document.querySelectorAll('.tb-quiz'), {resultTypes: ['violations']}))
  .violations.filter(violation => impacts.includes(violation.impact))
  .map(violation => violation.id + ': ' + violation.nodes.map(node => node.target.join(' ')).join(', '))"""


def test_quiz_answers_back_from_the_keyboard_offline(browser: Browser, book_build: BookBuild) -> None:
    """Opened from disk, a chapter's quiz gives each option's own feedback, chosen with the keyboard
    (Space, then the arrow keys) or a click, and judges typed numbers; with the feedback showing, axe
    finds no serious violation in it."""
    network = Network()
    context, tab = open_tab(browser, network)
    html_file = QUIZ_PAGE.html_file(book_build.html)
    try:
        tab.goto(html_file.as_uri(), wait_until="load")
        questions = tab.locator(".tb-quiz fieldset")
        assert questions.count() >= 3, f"{QUIZ_PAGE.path}: {questions.count()} quiz questions on the page"
        kinds = set()
        for index in range(questions.count()):
            question = questions.nth(index)
            feedback = question.locator(".tb-feedback")
            radios = question.locator("input[type=radio]")
            if radios.count():
                kinds.add("choice")
                radios.first.focus()
                for option in range(radios.count()):
                    radio = radios.nth(option)
                    tab.keyboard.press("Space" if option == 0 else "ArrowDown")
                    assert radio.is_checked(), f"{QUIZ_PAGE.path}: the keyboard did not choose option {option + 1}"
                    verdict = "Right." if radio.get_attribute("data-correct") == "true" else "Not quite."
                    expected = f"{verdict} {radio.evaluate(FEEDBACK_TEXT)}"
                    assert feedback.inner_text().strip() == expected, (
                        f"{QUIZ_PAGE.path}, question {index + 1}, option {option + 1}: shows "
                        f"{feedback.inner_text()!r}, expected {expected!r}"
                    )
                question.locator("label").first.click()
                assert feedback.inner_text().startswith(("Right.", "Not quite.")), "a click on a label gave no feedback"
            else:
                kinds.add("number")
                field = question.locator("input[type=text]")
                answer, tolerance = (
                    float(field.get_attribute("data-answer") or "nan"),
                    float(field.get_attribute("data-tolerance") or "nan"),
                )
                field.fill("twelve")
                field.press("Enter")
                assert feedback.inner_text().startswith("Type a number"), f"{QUIZ_PAGE.path}: {feedback.inner_text()!r}"
                field.fill(repr(answer + tolerance + 1 + abs(answer)))
                field.press("Enter")
                assert feedback.inner_text().startswith("Not quite."), f"{QUIZ_PAGE.path}: {feedback.inner_text()!r}"
                field.fill(field.get_attribute("data-answer") or "")
                field.press("Tab")  # to the Check button, pressed from the keyboard
                tab.keyboard.press("Enter")
                assert feedback.inner_text().startswith("Right."), f"{QUIZ_PAGE.path}: {feedback.inner_text()!r}"
        # Taken before axe runs: axe reads the stylesheets with XMLHttpRequest, which file:// refuses.
        problems = network.problems()
        tab.add_script_tag(path=str(AXE))
        violations = tab.evaluate(AXE_ON_QUIZZES, BLOCKING_IMPACTS)
    finally:
        context.close()
    assert kinds == {"choice", "number"}, f"{QUIZ_PAGE.path}: the quiz tested only {kinds} questions"
    assert not problems, f"{QUIZ_PAGE.path} from disk:{listed(problems)}"
    assert not violations, f"{QUIZ_PAGE.path}: axe-core, with the quiz's feedback showing:{listed(violations)}"


# ---------------------------------------------------------------------------------------------
# The explorables: moved from the keyboard, they show what Python computes from the same data

#: The chapters that show each explorable.
HEADS_AND_SAMPLING_PAGE = next(page for page in CHAPTERS if page.name == "decoder-only")
MEMORY_PAGE = next(page for page in CHAPTERS if page.name == "modern-decoder")
AXE_ON_EXPLORABLES = AXE_ON_QUIZZES.replace(".tb-quiz", ".tb-explore")
#: Slider settings of the sampling explorer: temperature, top-k (None: off), top-p (None: off).
SAMPLING_SETTINGS = [(0.5, 10, None), (1.5, None, 0.6), (1.0, 5, 0.5), (0.1, 3, 0.95)]


def explorable_data(block: Any) -> Any:
    return json.loads(block.get_attribute("data-explorable") or "null")


def open_explorables(browser: Browser, page: Page, html_root: Path) -> tuple[BrowserContext, Tab, Network]:
    network = Network()
    context, tab = open_tab(browser, network)
    tab.goto(page.html_file(html_root).as_uri(), wait_until="load")
    return context, tab, network


def axe_on_explorables(tab: Tab, network: Network) -> tuple[list[str], list[str]]:
    """The page's network problems (taken before axe, which file:// refuses stylesheets), and axe's findings
    in light and in dark mode (where the theme puts HTML outputs on a light panel of their own)."""
    problems = network.problems()
    tab.add_script_tag(path=str(AXE))
    violations = tab.evaluate(AXE_ON_EXPLORABLES, BLOCKING_IMPACTS)
    tab.emulate_media(color_scheme="dark")
    tab.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    violations += [f"in dark mode, {found}" for found in tab.evaluate(AXE_ON_EXPLORABLES, BLOCKING_IMPACTS)]
    return problems, violations


def test_sampling_explorer_filters_as_python_does(browser: Browser, book_build: BookBuild) -> None:
    """Opened from disk, the sampling explorer's sliders move from the keyboard, and for each setting
    its table shows, token by token, the probabilities and cuts of explorables.filtered_distribution."""
    from transformer_book.explorables import filtered_distribution, fixed

    page = HEADS_AND_SAMPLING_PAGE
    context, tab, network = open_explorables(browser, page, book_build.html)
    try:
        block = tab.locator(".tb-sampling")
        assert block.count() == 1, f"{page.path}: {block.count()} sampling explorers"
        data = explorable_data(block)
        temperature = block.locator("input[name=temperature]")
        temperature.focus()
        tab.keyboard.press("ArrowLeft")
        assert temperature.input_value() == "0.95", (
            f"{page.path}: ArrowLeft set the temperature to {temperature.input_value()}"
        )
        filters = set()
        for setting in SAMPLING_SETTINGS:
            t, k, p = setting
            temperature.fill(str(t))
            block.locator("input[name=top_k]").fill(str(data["shown"] + 1 if k is None else k))
            block.locator("input[name=top_p]").fill(str(1 if p is None else p))
            probabilities, fate, final = filtered_distribution(data["logits"], t, k, p)
            rows = block.locator("tbody tr").evaluate_all(
                "rows => rows.map(row => Array.from(row.cells, c => c.textContent))"
            )
            expected = [
                [fixed(probabilities[i], 4), "kept" if fate[i] == "kept" else f"cut by {fate[i]}", fixed(final[i], 4)]
                for i in data["ids"]
            ]
            shown = [[row[2], row[4], row[5]] for row in rows]
            filters |= {row[4] for row in rows}
            assert shown == expected, (
                f"{page.path}, temperature {t}, top-k {k}, top-p {p}: the table differs from Python's"
            )
            kept = sum(f == "kept" for f in fate)
            assert f"keeps {kept} of {len(data['logits'])} tokens" in block.locator(".tb-readout").inner_text()
        problems, violations = axe_on_explorables(tab, network)
    finally:
        context.close()
    assert filters == {"kept", "cut by top-k", "cut by top-p"}, f"{page.path}: the settings showed only {filters}"
    assert not problems, f"{page.path} from disk:{listed(problems)}"
    assert not violations, f"{page.path}: axe-core on the explorables:{listed(violations)}"


def test_head_view_shows_the_weights_python_computed(browser: Browser, book_build: BookBuild) -> None:
    """Opened from disk, the head view answers a layer and head picked from the keyboard and a token
    reached with Tab with that token's attention weights, as the chapter computed them."""
    from transformer_book.explorables import fixed

    page = HEADS_AND_SAMPLING_PAGE
    context, tab, network = open_explorables(browser, page, book_build.html)
    try:
        block = tab.locator(".tb-heads")
        assert block.count() == 1, f"{page.path}: {block.count()} head views"
        data = explorable_data(block)
        tokens, weights = data["tokens"], data["weights"]
        layers, heads, m = len(weights), len(weights[0]), len(tokens)
        readouts = set()
        for layer, head, query in [(layers - 1, heads - 1, m - 1), (0, 1 % heads, m // 2), (layers // 2, 0, 1)]:
            block.locator("select[name=layer]").select_option(str(layer))
            block.locator("select[name=head]").select_option(str(head))
            block.locator(".tb-token").nth(query).focus()
            row = weights[layer][head][query]
            listed_weights = ", ".join(
                f"{json.dumps(tokens[key], ensure_ascii=False)} {fixed(row[key], 3)}" for key in range(query + 1)
            )
            expected = f"Layer {layer}, head {head}: token {query} {json.dumps(tokens[query], ensure_ascii=False)} attends to {listed_weights}."
            readout = block.locator(".tb-readout").inner_text()
            assert readout == expected, f"{page.path}: shows {readout!r}, Python computed {expected!r}"
            assert block.locator(".tb-token").nth(query).get_attribute("aria-pressed") == "true"
            readouts.add(readout)
        tab.keyboard.press("Shift+Tab")  # the token before, from the keyboard
        assert block.locator(".tb-readout").inner_text().startswith(f"Layer {layers // 2}, head 0: token 0 ")
        problems, violations = axe_on_explorables(tab, network)
    finally:
        context.close()
    assert len(readouts) == 3, f"{page.path}: the readout did not change with the layer, head and token"
    assert not problems, f"{page.path} from disk:{listed(problems)}"
    assert not violations, f"{page.path}: axe-core on the explorables:{listed(violations)}"


def test_memory_calculator_recomputes_as_python_does(browser: Browser, book_build: BookBuild) -> None:
    """Opened from disk, the calculator shows explorables.memory_estimate of the chapter's configuration
    and of two typed ones, and says when a configuration is not valid."""
    from transformer_book.explorables import format_estimate, memory_estimate

    page = MEMORY_PAGE
    context, tab, network = open_explorables(browser, page, book_build.html)
    typed = [
        {"d_model": 2_048, "num_layers": 16, "num_heads": 32, "num_kv_heads": 8, "d_ff": 8_192, "batch_size": 4},
        {"vocab_size": 32_000, "num_kv_heads": 1, "context": 4_096, "bytes_per_number": 4, "tokens": 10**9},
    ]
    try:
        block = tab.locator(".tb-memory")
        assert block.count() == 1, f"{page.path}: {block.count()} memory calculators"
        config = explorable_data(block)["config"]

        def shown() -> dict[str, str]:
            return dict(block.locator("dd").evaluate_all("dds => dds.map(dd => [dd.dataset.name, dd.textContent])"))

        answers = [shown()]
        assert answers[0] == format_estimate(memory_estimate(**config)), f"{page.path}: the chapter's configuration"
        for changes in typed:
            for name, value in changes.items():
                block.locator(f"input[name={name}]").fill(str(value))
            config |= changes
            answers.append(shown())
            assert answers[-1] == format_estimate(memory_estimate(**config)), f"{page.path}: {config}"
        block.locator("input[name=num_kv_heads]").fill("3")
        readout = block.locator(".tb-readout").inner_text()
        problems, violations = axe_on_explorables(tab, network)
    finally:
        context.close()
    assert len({answer["parameters"] for answer in answers}) == 3, f"{page.path}: the answers did not change"
    assert readout == "Not a valid configuration: key-value heads must divide query heads.", readout
    assert not problems, f"{page.path} from disk:{listed(problems)}"
    assert not violations, f"{page.path}: axe-core on the explorables:{listed(violations)}"
