"""Write the course website's pages from the package, the README, the guide and the notebooks folder.

    python docs/gen_site.py [--out docs/_build] [--notebooks GLOB ...] [--no-execute]

then `mkdocs build -f docs/_build/mkdocs.yml` builds them into `site/`; `bash docs/build.sh` does both. Every
page is made at build time from what runs, so a layer, a variant or a notebook added later has its page without
anyone listing it:

- a front page (docs/index.md, with the README below its title) and one page per file of docs/guide/ (the
  guide, in the order the README links them; a reader without the site reads the same files in the repository);
- one page per file of `minitransformer/layers/` and `minitransformer/variants/`: the module docstring, then for
  each class its docstring, `forward`'s docstring and code, `backward`'s docstring and code (the code is read from
  the module with `inspect`, so page and code cannot disagree), and each public function the same way;
- every `notebooks/NN_*.ipynb`, executed here into the build folder (the committed ones stay without outputs);
- the errata (one section per `## E<n>.` heading of the errata notebook, linking its cell, and the
  `notebooks/errata_*.md` notes), the benchmarks README, the API reference of every other room, CONTRIBUTING and
  the CHANGELOG.

Why MkDocs with Material, mkdocs-jupyter and mkdocstrings: the least code of our own. Material gives navigation,
offline search (lunr, run in the page) and code blocks with titles and line numbers; mkdocs-jupyter renders an
executed notebook, figures and all, as a page of the site; mkdocstrings renders Google-style docstrings, which
every file here already has. Jupyter Book would also work but brings Sphinx and a second markup (MyST) to learn
for contributors; Sphinx + MyST-NB the same. The mathematics is rendered by KaTeX from npm (docs/package.json),
copied into the site, and the fonts are the reader's own (`font: false`): nothing is fetched when reading.

Mathematics in docstrings: `$...$` inline and a `$$` line above and below a display (raw docstrings, r\"\"\"),
as LayerNorm's, attention's and softmax's show; an indented block of plain text (the older docstrings' derivation
lines) is shown as it is written, in a code block.
"""

import argparse
import ast
import fnmatch
import hashlib
import html
import importlib
import inspect
import json
import os
import pathlib
import posixpath
import re
import shutil
import sys
import textwrap

import nbformat
import yaml

DOCS = pathlib.Path(__file__).resolve().parent
REPO = DOCS.parent
PACKAGE = "minitransformer"
LAYER_ROOMS = ("layers", "variants")
REFERENCE_ROOMS = ("core", "fast", "models", "tokenizers", "training", "generation", "gradcheck", "interop",
                   "exercises", "commands")
ERRATA_NOTEBOOK = "06_errata"
_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
_CODE_PATH = re.compile(r"(?<![\[`])`(?P<path>[\w./-]+\.(?:py|ipynb|md))`(?![\]`])")
_ERRATUM = re.compile(r"^##\s+(E\d+)\.\s+(.*)$")


# ----------------------------------------------------------------------------------------------- the site map
class SiteMap:
    """Which page of the site stands for which file of the repository (None: no page)."""

    def __init__(self, notebooks, guide):
        self.pages = {"README.md": "index.md", "benchmarks/README.md": "benchmarks.md",
                      "CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "contributing.md",
                      "notebooks": "guide/notebooks.md", f"{PACKAGE}/layers": "layers/index.md",
                      f"{PACKAGE}/variants": "variants/index.md"}
        for room in LAYER_ROOMS:
            for path in layer_files(room):
                self.pages[f"{PACKAGE}/{room}/{path.name}"] = f"{room}/{path.stem}.md"
        for path in notebooks:
            self.pages[f"notebooks/{path.name}"] = f"notebooks/{path.name}"
        for path in sorted((REPO / "notebooks").glob("errata_*.md")):
            self.pages[f"notebooks/{path.name}"] = f"errata/{path.name}"
        for path in guide:
            self.pages[f"docs/guide/{path.name}"] = f"guide/{path.name}"

    def page_for(self, repo_path):
        """The page for a repository path (with an optional #anchor), or None."""
        path, _, anchor = repo_path.partition("#")
        path = posixpath.normpath(path).rstrip("/") if path else ""
        page = self.pages.get(path)
        return page and (f"{page}#{anchor}" if anchor else page)

    def guess(self, name):
        """The repository path that a bare name in backquotes most likely means (`layers/x.py`, `NN_x.ipynb`)."""
        for candidate in (name, f"{PACKAGE}/{name}", f"notebooks/{name}"):
            if posixpath.normpath(candidate) in self.pages:
                return candidate
        return None


def relative(target_page, from_page):
    """A link from one page of the site to another (both paths inside the pages' folder)."""
    path, _, anchor = target_page.partition("#")
    link = posixpath.relpath(path, posixpath.dirname(from_page) or ".")
    return f"{link}#{anchor}" if anchor else link


def rewrite_links(text, source, page, site):
    """Point a repository file's links at the site's pages: relative links, and paths written in backquotes.

    `source` is the file's path in the repository, `page` the page it becomes. A link to a file that has no
    page (a test, a script) keeps its text and loses the link; links with a scheme are left alone.
    """
    here = posixpath.dirname(source)

    def link(match):
        target = match["target"]
        if re.match(r"^[a-z]+:", target) or (target.startswith("#") and source != "README.md"):
            return match[0]
        found = site.page_for(f"README.md{target}" if target.startswith("#") else posixpath.join(here, target))
        return f"[{match['text']}]({relative(found, page)})" if found else match["text"]

    def code_path(match):
        repo_path = site.guess(posixpath.normpath(posixpath.join(here, match["path"]))) or site.guess(match["path"])
        found = repo_path and site.page_for(repo_path)
        return f"[{match[0]}]({relative(found, page)})" if found and found != page else match[0]

    return outside_fences(text, lambda line: _CODE_PATH.sub(code_path, _LINK.sub(link, line)))


def outside_fences(text, change):
    """Apply change() to each line of markdown that is not inside a fenced code block."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        lines.append(line if fenced else change(line))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- README, guide
def readme_body():
    """The README below its title: the front page's text."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines).strip()


def guide_pages():
    """The files of docs/guide/: first those the README links, in its order, then any other by name."""
    linked = [posixpath.normpath(match["target"].partition("#")[0])
              for match in _LINK.finditer((REPO / "README.md").read_text(encoding="utf-8"))]
    files = {f"docs/guide/{path.name}": path for path in (DOCS / "guide").glob("*.md")}
    order = [files.pop(target) for target in dict.fromkeys(linked) if target in files]
    return order + sorted(files.values())


def guide_title(path):
    """A guide page's title: its first line, a `# ` heading."""
    return path.read_text(encoding="utf-8").splitlines()[0].removeprefix("# ").strip()


# ----------------------------------------------------------------------------------------------- layer pages
def layer_files(room):
    """The modules of one room of layers, in name order (private files and __init__ left out)."""
    return sorted(path for path in (REPO / PACKAGE / room).glob("*.py") if not path.name.startswith("_"))


def defined_here(module):
    """The public classes and functions that a module defines (not imports), in source order."""
    members = [obj for name, obj in vars(module).items()
               if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
               and obj.__module__ == module.__name__]
    return sorted(members, key=lambda obj: inspect.getsourcelines(obj)[1])


def code_block(obj, module_path):
    """The code of a function or method as a titled block with the file's line numbers.

    Its docstring is left out (the page has just rendered it): the block starts at the first line after it.
    """
    lines, first = inspect.getsourcelines(obj)
    node = ast.parse(textwrap.dedent("".join(lines))).body[0]
    signature = lines[0].strip()
    start = node.body[0].end_lineno if ast.get_docstring(node) is not None else 0
    body = textwrap.dedent("".join(lines[start:])).rstrip()
    title = f"{module_path}, lines {first + start}-{first + start + body.count(chr(10))}: {signature}"
    return f'```python linenums="{first + start}" title="{title}"\n{body}\n```\n'


def docstring_of(dotted):
    """A mkdocstrings directive that renders one object's docstring (no heading: the page gives it one)."""
    return f"::: {dotted}\n    options:\n      members: false\n      show_root_heading: false\n"


def layer_page(room, path):
    """The page of one layer or variant file: what it is, then each class's derivation beside its code."""
    dotted = f"{PACKAGE}.{room}.{path.stem}"
    module = importlib.import_module(dotted)
    module_path = f"{PACKAGE}/{room}/{path.name}"
    members = defined_here(module)
    title = ", ".join(obj.__name__ for obj in members if inspect.isclass(obj)) or \
        ", ".join(obj.__name__ for obj in members) or path.stem
    test = REPO / "tests" / f"test_{path.stem}.py"
    parts = [f"# {title}\n",
             f"`{module_path}`" + (f" · its tests: `tests/{test.name}`" if test.is_file() else "") + "\n",
             docstring_of(dotted)]
    for obj in members:
        parts.append(member_section(obj, f"{dotted}.{obj.__name__}", module_path))
    return "\n".join(parts)


def member_section(obj, dotted, module_path):
    """One class (docstring; forward's docstring and code; backward's) or one function (docstring and code)."""
    if not inspect.isclass(obj):
        return f"## `{obj.__name__}`\n\n{docstring_of(dotted)}\n{code_block(obj, module_path)}"
    parts = [f"## `{obj.__name__}`\n", docstring_of(dotted)]
    for name, heading in (("forward", "Forward"), ("backward", "Backward")):
        method = vars(obj).get(name)
        if method is not None:
            parts += [f"### {heading}\n", docstring_of(f"{dotted}.{name}"), code_block(method, module_path)]
    others = [name for name, value in vars(obj).items()
              if inspect.isfunction(value) and not name.startswith("_") and name not in ("forward", "backward")]
    if others:
        parts.append("Also: " + ", ".join(f"`{name}`" for name in others) + " (docstrings in the API reference).\n")
    return "\n".join(parts)


def room_index(room):
    """The list of a room's pages with each module's first docstring line."""
    heading = {"layers": "The layers", "variants": "The variants"}[room]
    rows = ["| file | what it is |", "| --- | --- |"]
    for path in layer_files(room):
        summary = (importlib.import_module(f"{PACKAGE}.{room}.{path.stem}").__doc__ or "").strip().splitlines()
        rows.append(f"| [{path.stem}]({path.stem}.md) | {summary[0] if summary else ''} |")
    intro = ("One page per file: the derivation from its docstrings, each step beside the code that computes it, "
             "forward above backward. The code shown is read from the package when the site is built.")
    return f"# {heading}\n\n{intro}\n\n" + "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------------------------- notebooks, errata
def execute_notebook(source, target):
    """Run a notebook top to bottom in a fresh kernel from inside notebooks/, and save it with its outputs."""
    from nbclient import NotebookClient
    notebook = nbformat.read(source, as_version=4)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ.pop("MPLBACKEND", None)           # the kernel's inline backend, so that figures become outputs
    os.environ["PYTHONHASHSEED"] = "0"
    # one BLAS thread per kernel, as tests/test_notebooks.py says why: on a shared 2-core machine a
    # multi-threaded OpenBLAS made notebook 5's small products about 20 times slower
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(source.parent)}}).execute()
    nbformat.write(notebook, target)


def executed(path, cache):
    """The notebook run, from the cache folder while neither it nor the package has changed."""
    digest = hashlib.sha256(path.read_bytes())
    for source in sorted((REPO / PACKAGE).rglob("*.py")):
        digest.update(source.read_bytes())
    cached = cache / f"{path.stem}-{digest.hexdigest()[:16]}.ipynb"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        for stale in cached.parent.glob(f"{path.stem}-*.ipynb"):
            stale.unlink()
        print(f"executing {path.name}", flush=True)
        execute_notebook(path, cached)
    return cached


def notebook_anchor(heading):
    """The id that a heading of a notebook's markdown cell has on its page (mkdocs-jupyter's, not nbconvert's)."""
    from mkdocs_jupyter.convert import add_anchor_lower_id
    return re.search(r'id="([^"]+)"', add_anchor_lower_id(f"<h2>{html.escape(heading)}</h2>"))[1]


def errata_page(site):
    """One section per `## E<n>.` heading of the errata notebook, each linking the cell that proves it."""
    source = REPO / "notebooks" / f"{ERRATA_NOTEBOOK}.ipynb"
    notebook_page = site.page_for(f"notebooks/{source.name}")
    parts = ["# Errata\n", "The lecture material contains mistakes. Each is listed here with the correction; "
             "the errata notebook proves each one with a computation and an `assert`.\n"]
    for cell in nbformat.read(source, as_version=4).cells:
        first, _, rest = cell.source.partition("\n")
        match = _ERRATUM.match(first) if cell.cell_type == "markdown" else None
        if match:
            parts.append(f"## {match[1]}. {match[2]}\n\n{rest.strip()}\n")
            if notebook_page:
                link = relative(f"{notebook_page}#{notebook_anchor(first[3:].strip())}", "errata/index.md")
                parts.append(f"[The computation that proves it, in the errata notebook]({link})\n")
    parts.append("## Notes behind the errata\n")
    for path in sorted((REPO / "notebooks").glob("errata_*.md")):
        title = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        parts.append(f"- [{title}]({path.name})")
    return rewrite_links("\n".join(parts) + "\n", f"notebooks/{source.name}", "errata/index.md", site)


# ----------------------------------------------------------------------------------------------- API reference
def reference_page(room):
    """Every public module of one room of the package, rendered from its docstrings."""
    modules = [f"{PACKAGE}.{room}"] + sorted(
        f"{PACKAGE}.{room}.{'.'.join(path.relative_to(REPO / PACKAGE / room).with_suffix('').parts)}"
        for path in (REPO / PACKAGE / room).rglob("*.py")
        if not any(part.startswith("_") for part in path.relative_to(REPO / PACKAGE / room).parts))
    modules = [name.removesuffix(".__init__") for name in modules]
    parts = [f"# `{room}/`\n"]
    for dotted in dict.fromkeys(modules):
        parts.append(f"## `{dotted}`\n\n::: {dotted}\n    options:\n      members: true\n")
    return "\n".join(parts)


def reference_index():
    """Where each room's reference is; the layers and variants are documented on their own pages."""
    rows = [f"- [`{room}/`]({room}.md)" for room in REFERENCE_ROOMS]
    rows += [f"- [`{room}/`](../{room}/index.md): one page per file, derivation beside the code"
             for room in LAYER_ROOMS]
    return "# API reference\n\nGenerated from the docstrings, room by room (the map's order).\n\n" + \
        "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------------------------- the whole site
def write(pages_dir, page, text):
    path = pages_dir / page
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def copy_repo_file(pages_dir, site, repo_path, page):
    """A markdown file of the repository as a page, its links pointed at the site."""
    text = (REPO / repo_path).read_text(encoding="utf-8")
    write(pages_dir, page, rewrite_links(text, repo_path, page, site))


NPM_FILES = ("katex/dist/katex.min.js", "iframe-worker/shim/index.js")      # what docs/package.json installs


def copy_assets(pages_dir):
    """Our JavaScript and CSS; KaTeX and Material's search shim from docs/node_modules (npm ci --prefix docs)."""
    shutil.copytree(DOCS / "assets", pages_dir, dirs_exist_ok=True)
    modules = DOCS / "node_modules"
    missing = [name for name in NPM_FILES if not (modules / name).is_file()]
    if missing:
        sys.exit(f"error: docs/node_modules has no {', '.join(missing)}: run `npm ci --prefix docs` "
                 "(docs/build.sh does)")
    shutil.copytree(modules / "katex" / "dist", pages_dir / "assets" / "katex",
                    ignore=shutil.ignore_patterns("*.mjs", "katex.js", "katex.css", "README.md"))
    shim = pages_dir / "assets" / "javascripts" / "iframe-worker" / "shim.js"
    shim.parent.mkdir(parents=True)
    shutil.copy(modules / "iframe-worker" / "shim" / "index.js", shim)


def select_notebooks(patterns):
    paths = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return [path for path in paths if not patterns or any(fnmatch.fnmatch(path.stem, p) for p in patterns)]


def write_pages(pages_dir, notebooks, execute):
    """Every page; returns the navigation."""
    guide = guide_pages()
    site = SiteMap(notebooks, guide)
    readme = rewrite_links(readme_body(), "README.md", "index.md", site)
    write(pages_dir, "index.md", (DOCS / "index.md").read_text(encoding="utf-8").replace("<!-- README -->", readme))
    for path in guide:
        copy_repo_file(pages_dir, site, f"docs/guide/{path.name}", f"guide/{path.name}")
    nav_rooms = {}
    for room in LAYER_ROOMS:
        write(pages_dir, f"{room}/index.md", room_index(room))
        for path in layer_files(room):
            write(pages_dir, f"{room}/{path.stem}.md", layer_page(room, path))
        nav_rooms[room] = [f"{room}/index.md"] + [{path.stem: f"{room}/{path.stem}.md"} for path in layer_files(room)]
    for path in notebooks:
        target = pages_dir / "notebooks" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(executed(path, pages_dir.parent / "executed") if execute else path, target)
    write(pages_dir, "errata/index.md", errata_page(site))
    errata_notes = sorted((REPO / "notebooks").glob("errata_*.md"))
    for path in errata_notes:
        copy_repo_file(pages_dir, site, f"notebooks/{path.name}", f"errata/{path.name}")
    for repo_path, page in (("benchmarks/README.md", "benchmarks.md"), ("CHANGELOG.md", "changelog.md"),
                            ("CONTRIBUTING.md", "contributing.md")):
        copy_repo_file(pages_dir, site, repo_path, page)
    write(pages_dir, "reference/index.md", reference_index())
    for room in REFERENCE_ROOMS:
        write(pages_dir, f"reference/{room}.md", reference_page(room))
    copy_assets(pages_dir)
    teaching = ("for-instructors", "course-plan")          # beside each other, in a section of their own
    nav_guide = [{guide_title(path): f"guide/{path.name}"} for path in guide if path.stem not in teaching]
    return [{"Home": "index.md"}, {"Guide": nav_guide}, {"Layers": nav_rooms["layers"]},
            {"Variants": nav_rooms["variants"]}, {"Notebooks": [f"notebooks/{p.name}" for p in notebooks]},
            {"Errata": ["errata/index.md"] + [f"errata/{p.name}" for p in errata_notes]},
            {"Benchmarks": "benchmarks.md"},
            {"For instructors": [f"guide/{name}.md" for name in teaching if (DOCS / "guide" / f"{name}.md").is_file()]},
            {"API reference": ["reference/index.md"] + [{f"{r}/": f"reference/{r}.md"} for r in REFERENCE_ROOMS]},
            {"Contributing": "contributing.md"}, {"Changelog": "changelog.md"}]


def write_config(out, nav, site_dir):
    """mkdocs.yml of the build: docs/mkdocs.yml with the pages' folder, the output folder and the navigation."""
    config = yaml.safe_load((DOCS / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir="pages", site_dir=str(site_dir), nav=nav,
                  hooks=[str(DOCS / hook) for hook in config.get("hooks", [])])
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(REPO)]
    (out / "mkdocs.yml").write_text(json.dumps(config, indent=1), encoding="utf-8")      # JSON is YAML


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DOCS / "_build",
                        help="the build folder (replaced): its pages/ and mkdocs.yml (default docs/_build)")
    parser.add_argument("--site-dir", type=pathlib.Path, default=REPO / "site", help="where mkdocs writes the site")
    parser.add_argument("--notebooks", nargs="*", default=None, metavar="GLOB",
                        help="only the notebooks whose name matches (e.g. '01_*'); default all")
    parser.add_argument("--no-execute", action="store_true", help="copy the notebooks without running them")
    args = parser.parse_args(argv)
    notebooks = select_notebooks(args.notebooks)
    if args.notebooks and not notebooks:
        parser.error(f"--notebooks {' '.join(args.notebooks)} matches no notebook in notebooks/")
    pages_dir = args.out.resolve() / "pages"
    if pages_dir.exists():
        shutil.rmtree(pages_dir)
    sys.path.insert(0, str(REPO))
    nav = write_pages(pages_dir, notebooks, execute=not args.no_execute)
    write_config(args.out.resolve(), nav, args.site_dir.resolve())
    print(f"wrote {sum(1 for _ in pages_dir.rglob('*.md')) + len(notebooks)} pages into {pages_dir}")


if __name__ == "__main__":
    main()
