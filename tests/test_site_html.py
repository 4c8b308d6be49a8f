"""The built HTML, read without a browser: links resolve, images have real alt text, headings
are in order, and no page asks anything of the network.

Every test reads the one build of the session (the ``book_build`` fixture); none builds again.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit

import colab_twin
import jupytext
import pytest
from bs4 import BeautifulSoup, Tag

from built_site import PAGES, REDIRECT, SLIDES, Page, built_pages, page_id
from chapters import part_chapters, parts, repository_url

if TYPE_CHECKING:
    from conftest import BookBuild

pytestmark = pytest.mark.build

#: Elements and attributes that point at another resource.
LINK_ATTRIBUTES = {
    "a": "href",
    "area": "href",
    "link": "href",
    "script": "src",
    "img": "src",
    "source": "src",
    "iframe": "src",
    "video": "src",
    "audio": "src",
    "embed": "src",
    "object": "data",
}
#: Elements whose resource the browser fetches while loading the page (an <a> is only followed).
LOADED_BY_THE_PAGE = {"link", "script", "img", "source", "iframe", "video", "audio", "embed", "object"}
NOT_A_LOCATION = ("mailto:", "tel:", "javascript:", "data:")
IMAGE_FILE = re.compile(r"\.(png|jpe?g|gif|svg|webp|avif|bmp)$", re.IGNORECASE)
#: An image in the text of a page must be described, not merely labelled.
MIN_CONTENT_ALT_WORDS = 4
BASE = "http://book.invalid/"  # resolves relative links the way a browser would; never fetched


def soup_of(html_file: Path) -> BeautifulSoup:
    return BeautifulSoup(html_file.read_text(encoding="utf-8"), "html.parser")


def attribute(tag: Tag, name: str) -> str | None:
    """An attribute as text (BeautifulSoup returns a list for multi-valued ones such as class)."""
    value = tag.get(name)
    return " ".join(value) if isinstance(value, list) else value


def tags(soup: BeautifulSoup | Tag, *args: Any, **kwargs: Any) -> list[Tag]:
    """``find_all``, keeping elements only (BeautifulSoup's types also allow text nodes)."""
    return [tag for tag in soup.find_all(*args, **kwargs) if isinstance(tag, Tag)]


@functools.lru_cache(maxsize=None)
def anchors_in(html_file: Path) -> frozenset[str]:
    """Every fragment a link may point at in a page: ids, and the names of old-style anchors."""
    soup = soup_of(html_file)
    ids = {attribute(tag, "id") for tag in tags(soup, id=True)}
    names = {attribute(tag, "name") for tag in tags(soup, "a", attrs={"name": True})}
    return frozenset(anchor for anchor in ids | names if anchor)


def built_page(html_root: Path, page: Page) -> Path:
    html_file = page.html_file(html_root)
    if not html_file.is_file():
        pytest.fail(f"{page.path} was not built (see test_build for why)", pytrace=False)
    return html_file


@dataclass
class Link:
    tag: str
    target: str  # as written in the page

    def __str__(self) -> str:
        return f"<{self.tag}> {self.target}"


def links_in(soup: BeautifulSoup) -> list[Link]:
    """Every resource a page points at, including the target of a ``<meta http-equiv="refresh">``."""
    links = [
        Link(tag.name, target.strip())
        for tag_name, name in LINK_ATTRIBUTES.items()
        for tag in tags(soup, tag_name)
        if (target := attribute(tag, name))
    ]
    for meta in tags(soup, "meta", attrs={"http-equiv": re.compile("^refresh$", re.IGNORECASE)}):
        match = re.search(r"url\s*=\s*['\"]?([^'\";]+)", attribute(meta, "content") or "", re.IGNORECASE)
        if match:
            links.append(Link("meta refresh", match.group(1).strip()))
    return links


def is_external(target: str) -> bool:
    return bool(urlsplit(target).scheme) or target.startswith("//")


def broken_reason(html_root: Path, page_path: str, target: str) -> str | None:
    """Why an internal link does not resolve, or None when its file and its fragment exist."""
    url = urlsplit(urljoin(BASE + page_path, target))
    path = unquote(url.path).removeprefix("/")
    if path == "" or path.endswith("/"):
        path += "index.html"
    relative = PurePosixPath(path)
    if ".." in relative.parts:
        return "points outside the site"
    file = html_root / relative
    if not file.is_file():
        return f"no file {relative}"
    fragment = unquote(url.fragment)
    if fragment and file.suffix == ".html" and fragment not in anchors_in(file):
        return f"{relative} has no element with id {fragment!r}"
    return None


def test_every_built_page_is_checked(book_build: BookBuild) -> None:
    """The per-page tests here and in test_site_browser.py cover every page the build wrote."""
    built = built_pages(book_build.html)
    known = {page.path for page in PAGES} | {REDIRECT.path}
    assert built, f"no HTML pages in {book_build.html}: the book did not build (see test_build)"
    unchecked = sorted(built - known)
    assert not unchecked, (
        f"pages built but not checked: {unchecked}; add them to tests/built_site.py (a page of _toc.yml is added by itself)"
    )


@pytest.mark.parametrize("page", PAGES + [REDIRECT], ids=page_id)
def test_internal_links_resolve(book_build: BookBuild, site_report: list[str], page: Page) -> None:
    html_file = built_page(book_build.html, page)
    internal, external, broken = 0, 0, []
    for link in links_in(soup_of(html_file)):
        if link.target.lower().startswith(NOT_A_LOCATION):
            continue
        if is_external(link.target):
            external += 1
            continue
        internal += 1
        reason = broken_reason(book_build.html, page.path, link.target)
        if reason:
            broken.append(f"{link}: {reason}")
    site_report.append(f"{page.path}: {internal} internal links checked, {external} external links not checked")
    assert internal > 0, f"{page.path} has no internal link at all: is it an empty page?"
    assert not broken, f"{page.path} has {len(broken)} broken internal link(s):\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_page_loads_nothing_from_outside(book_build: BookBuild, page: Page) -> None:
    """Scripts, styles, images and fonts come from the site itself, so it reads offline."""
    html_file = built_page(book_build.html, page)
    outside = [
        str(link)
        for link in links_in(soup_of(html_file))
        if link.tag in LOADED_BY_THE_PAGE and is_external(link.target) and not link.target.startswith("data:")
    ]
    assert not outside, f"{page.path} loads from the network:\n" + "\n".join(outside)


def test_stylesheets_load_nothing_from_outside(book_build: BookBuild) -> None:
    """No stylesheet of the site imports a web font or a style from the network."""
    remote = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*(?:https?:)?//""", re.IGNORECASE)
    stylesheets = sorted(book_build.html.rglob("*.css"))
    assert stylesheets, f"no stylesheet in {book_build.html}: the book did not build (see test_build)"
    offenders = [
        f"{css.relative_to(book_build.html)}: {match.group(0)}..."
        for css in stylesheets
        for match in remote.finditer(css.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not offenders, "stylesheets that load from the network:\n" + "\n".join(offenders)


def alt_text_problem(image: Tag) -> str | None:
    """Why an image's alt text does not describe it, or None when it does."""
    alt = attribute(image, "alt")
    source = attribute(image, "src") or ""
    if alt is None:
        return "has no alt attribute"
    text = alt.strip()
    if not text:
        return "has an empty alt text"
    if IMAGE_FILE.search(text) or text in (source, PurePosixPath(source).name) or ("/" in text and " " not in text):
        return f"has a file name for alt text ({text!r}): give the figure an :alt: option"
    if image.find_parent("article") is not None and len(text.split()) < MIN_CONTENT_ALT_WORDS:
        return f"has a label, not a description, for alt text ({text!r}): say what the figure shows"
    return None


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_images_have_real_alt_text(book_build: BookBuild, page: Page) -> None:
    soup = soup_of(built_page(book_build.html, page))
    problems = [f"{image.get('src')}: {problem}" for image in tags(soup, "img") if (problem := alt_text_problem(image))]
    assert not problems, f"{page.path}: images without real alt text:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_headings_are_in_order(book_build: BookBuild, page: Page) -> None:
    """One h1, the page's title, and no level skipped below it (h2 then h4 confuses a screen reader)."""
    soup = soup_of(built_page(book_build.html, page))
    article = soup.select_one("article.bd-article") or soup.find("main")
    assert article is not None, f"{page.path} has no article or main element"
    headings = [
        (int(heading.name[1]), heading.get_text(" ", strip=True).removesuffix("#").strip())
        for heading in tags(article, re.compile(r"^h[1-6]$"))
    ]
    assert headings, f"{page.path} has no heading"
    assert headings[0][0] == 1, f"{page.path} starts with h{headings[0][0]} {headings[0][1]!r}, not with an h1 title"
    titles = [text for level, text in headings if level == 1]
    assert len(titles) == 1, f"{page.path} has {len(titles)} h1 headings {titles}: a page has one title"
    skips = [
        f"h{previous} {previous_text!r} is followed by h{level} {text!r}"
        for (previous, previous_text), (level, text) in zip(headings, headings[1:])
        if level > previous + 1
    ]
    assert not skips, f"{page.path} skips heading levels:\n" + "\n".join(skips)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_unrendered_math(book_build: BookBuild, page: Page) -> None:
    """Every $...$ of the source became MathJax math: a dollar sign left in the prose means the
    Markdown parser broke a formula, for example at a line that starts with "+" (a list item)."""
    soup = soup_of(built_page(book_build.html, page))
    article = soup.select_one("article.bd-article") or soup.find("main")
    assert article is not None, f"{page.path} has no article or main element"
    for code in tags(article, ["pre", "code", "script", "style"]):
        code.decompose()
    prose = article.get_text(" ")
    leftovers = [prose[max(0, match.start() - 50) : match.end() + 50] for match in re.finditer(r"\$", prose)]
    assert not leftovers, f"{page.path}: dollar signs left in the rendered prose:\n" + "\n".join(leftovers)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_output_shows_a_python_warning(book_build: BookBuild, page: Page) -> None:
    """A warning printed by a cell (a library's TqdmWarning, a FutureWarning) lands on the page as red text
    that no reader can act on: silence it where it is raised, for a reason the code states."""
    soup = soup_of(built_page(book_build.html, page))
    warnings = [
        output.get_text(" ")[max(0, match.start() - 80) : match.end() + 80]
        for output in soup.select("div.cell_output")
        for match in re.finditer(r"\b[A-Z]\w*Warning\b:", output.get_text(" "))
    ]
    assert not warnings, f"{page.path}: cell outputs show Python warnings:\n" + "\n".join(warnings)


def test_every_website_link_of_the_colab_twins_resolves_in_the_built_site(book_build: BookBuild) -> None:
    """The twins link citations, terms and cross-references to the website: each page and anchor exists."""
    site = colab_twin.site_url()
    broken = []
    for twin in colab_twin.paths_of():
        for cell in json.loads(twin.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for target in re.findall(r"\]\((" + re.escape(site) + r"[^)\s]*)\)", "".join(cell["source"])):
                reason = broken_reason(book_build.html, "index.html", target.removeprefix(site))
                if reason:
                    broken.append(f"{twin.name}: {target}: {reason}")
    assert not broken, f"{len(broken)} website link(s) of the Colab twins do not resolve:\n" + "\n".join(broken[:20])


QUIZ_PAGES = [page for page in PAGES if page.source in part_chapters()]


def quiz_questions(chapter: Path) -> int:
    """How many questions the chapter's quiz cell asks: its calls of Choice and Number."""
    cell = next(cell.source for cell in jupytext.read(chapter).cells if "show_quiz(" in cell.source)
    return sum(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Choice", "Number"}
        for node in ast.walk(ast.parse(cell))
    )


@pytest.mark.parametrize("page", QUIZ_PAGES, ids=page_id)
def test_chapter_page_shows_its_quiz(book_build: BookBuild, page: Page) -> None:
    """The quiz cell's output reached the page: one question per question of the source, each with
    labelled controls and a live region for its feedback, and the script that answers back inline."""
    assert page.source is not None
    soup = soup_of(built_page(book_build.html, page))
    quizzes = tags(soup, "div", class_="tb-quiz")
    assert len(quizzes) == 1, f"{page.path} shows {len(quizzes)} quizzes, expected 1"
    questions = tags(quizzes[0], "fieldset")
    assert len(questions) == quiz_questions(page.source) >= 3, (
        f"{page.path} shows {len(questions)} questions, its source asks {quiz_questions(page.source)}"
    )
    for question in questions:
        assert len(tags(question, "p", attrs={"role": "status", "aria-live": "polite"})) == 1
        for field in tags(question, "input"):
            assert tags(question, "label", attrs={"for": attribute(field, "id")}), f"{page.path}: an unlabelled input"
    scripts = tags(quizzes[0], "script")
    assert len(scripts) == 1 and not attribute(scripts[0], "src"), f"{page.path}: the quiz's script is not inline"


def test_site_publishes_this_commits_wheel(book_build: BookBuild) -> None:
    """The Colab bootstrap installs ``_static/<wheel>`` from the site (``_ext/site_assets.py`` builds it):
    it is a valid wheel holding every file of src/transformer_book byte for byte, and nothing else
    besides its dist-info, so the notebooks install the package of the commit the site was built from."""
    import zipfile

    from chapters import ROOT, wheel_name

    wheel = book_build.html / "_static" / wheel_name()
    assert wheel.is_file(), f"the site has no _static/{wheel_name()}, which every Colab bootstrap installs"
    assert zipfile.is_zipfile(wheel), f"{wheel.name} is not a zip archive"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None, f"{wheel.name} is corrupt"
        names = [name for name in archive.namelist() if not name.endswith("/")]
        info = [name for name in names if name.split("/")[0].endswith(".dist-info")]
        assert {name.rsplit("/", 1)[-1] for name in info} >= {"METADATA", "WHEEL", "RECORD"}, info
        wheel_meta = archive.read(next(name for name in info if name.endswith("/WHEEL"))).decode()
        assert "Root-Is-Purelib: true" in wheel_meta and "Tag: py3-none-any" in wheel_meta, wheel_meta
        package = ROOT / "src"
        expected = {
            path.relative_to(package).as_posix(): path.read_bytes()
            for path in sorted((package / "transformer_book").rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }
        files = {name: archive.read(name) for name in names if name not in info}
    assert files.keys() == expected.keys(), (
        f"the published wheel's files differ from src/: missing {sorted(expected.keys() - files.keys())}, "
        f"extra {sorted(files.keys() - expected.keys())}"
    )
    changed = sorted(name for name in expected if files[name] != expected[name])
    assert not changed, f"the published wheel is not this commit's package: {changed} differ from src/"


@pytest.mark.parametrize("page", SLIDES, ids=page_id)
def test_each_parts_slides_show_its_chapters_figures_and_summaries(book_build: BookBuild, page: Page) -> None:
    """_ext/slides.py: a title slide that links every chapter of the Part, then each chapter's aims,
    its figures (the built images, with their captions) and its summary."""
    soup = soup_of(built_page(book_build.html, page))
    chapters = parts()[SLIDES.index(page)]
    first = soup.select("section.slide")[0]
    linked = {str(link["href"]) for link in first.find_all("a", href=True)}
    assert linked == {f"../book/{chapter.stem}.html" for chapter in chapters}, f"{page.path} links {sorted(linked)}"
    figures = soup.select("section.slide figure")
    assert figures and all(figure.find("img") and figure.find("figcaption") for figure in figures), (
        f"{page.path}: {len(figures)} figure slides, some without an image or a caption"
    )
    summaries = [heading for heading in soup.select("section.slide h2") if heading.get_text().endswith(": summary")]
    assert len(summaries) == len(chapters), f"{page.path}: {len(summaries)} summaries for {len(chapters)} chapters"


def test_the_course_plan_links_the_slides_of_every_part(book_build: BookBuild) -> None:
    soup = soup_of(book_build.html / "book" / "course-plan.html")
    linked = {str(link["href"]) for link in soup.find_all("a", href=True)}
    missing = [page.path for page in SLIDES if f"../{page.path}" not in linked]
    assert not missing, f"course-plan.html does not link {missing}"


def test_the_course_plan_links_the_assignment_of_every_part(book_build: BookBuild) -> None:
    soup = soup_of(book_build.html / "book" / "course-plan.html")
    linked = {str(link["href"]) for link in soup.find_all("a", href=True)}
    expected = [
        f"{repository_url()}/blob/main/assignments/part-{number}.ipynb" for number in range(1, len(parts()) + 1)
    ]
    missing = [url for url in expected if url not in linked]
    assert not missing, f"course-plan.html does not link the assignments {missing}"
