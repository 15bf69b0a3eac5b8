"""testing.docs: the commands of a Markdown section's code block, as a reader would type them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_platform.testing import docs

DOC = """\
# Title

## Install
Some text.
```yaml
key: value
```
- A list item with its commands:
  ```sh
  # a comment, then a blank line

  export KUBECONFIG=~/.kube/config
  .venv/bin/tool install \\
      --flag a \\
      --other b
  $ .venv/bin/tool run   # the shell drops this comment
  ```
```console
$ kubectl get pods
NAME   READY
web    1/1
$ kubectl apply \\
    -f x.yaml
pod/web configured
```

### A subsection (still inside Install)
```bash
echo sub
```

## Other
```sh
# ## Not a heading: inside a fence
echo other
```
"""


@pytest.fixture
def readme(tmp_path: Path) -> Path:
    path = tmp_path / "README.md"
    path.write_text(DOC)
    return path


def test_the_first_shell_block_of_a_section_joined_and_without_comments(readme: Path) -> None:
    assert docs.commands(readme, "Install") == [
        "export KUBECONFIG=~/.kube/config",
        ".venv/bin/tool install --flag a --other b",
        ".venv/bin/tool run   # the shell drops this comment",
    ]


def test_a_console_block_keeps_the_prompted_lines_only(readme: Path) -> None:
    assert docs.commands(readme, "## Install", index=1) == [
        "kubectl get pods",
        "kubectl apply -f x.yaml",
    ]


def test_a_section_ends_at_the_next_heading_of_its_level_not_at_a_subsection(readme: Path) -> None:
    assert [b.language for b in docs.blocks(readme, "Install")] == ["yaml", "sh", "console", "bash"]
    assert docs.commands(readme, "Install", index=2) == ["echo sub"]
    assert docs.commands(readme, "A subsection (still inside Install)") == ["echo sub"]
    assert "echo other" not in docs.section(readme, "Install")


def test_a_heading_inside_a_fence_is_not_a_heading(readme: Path) -> None:
    assert docs.commands(readme, "Other") == ["echo other"]
    with pytest.raises(docs.DocsError, match="no section with the heading 'Not a heading: inside a fence'"):
        docs.section(readme, "Not a heading: inside a fence")


def test_an_indented_block_loses_its_indentation_and_records_its_line(readme: Path) -> None:
    block = docs.blocks(readme, "Install")[1]
    assert block.line == 9
    assert block.lines[2] == "export KUBECONFIG=~/.kube/config"
    assert block.lines[4] == "    --flag a \\"


def test_a_missing_section_names_the_file_and_the_heading(readme: Path) -> None:
    with pytest.raises(docs.DocsError) as e:
        docs.commands(readme, "Using an existing cluster instead")
    assert str(e.value) == f"{readme}: no section with the heading 'Using an existing cluster instead'"


def test_a_section_without_such_a_block_names_the_file_the_heading_and_the_languages(readme: Path) -> None:
    with pytest.raises(docs.DocsError) as e:
        docs.commands(readme, "Other", languages=("console",))
    assert str(e.value) == f"{readme}: the section 'Other' has 0 ```console block(s), not the 1 asked for"
    with pytest.raises(docs.DocsError, match=r"'Install' has 3 ```sh/```bash/```shell/```console block"):
        docs.commands(readme, "Install", index=3)


def test_an_unclosed_fence_and_a_dangling_continuation_are_errors(tmp_path: Path) -> None:
    unclosed = tmp_path / "unclosed.md"
    unclosed.write_text("## A\n```sh\necho a\n")
    with pytest.raises(docs.DocsError, match=r"unclosed\.md: a code block opened with ``` is never closed"):
        docs.commands(unclosed, "A")
    dangling = tmp_path / "dangling.md"
    dangling.write_text("## A\n~~~sh\necho a \\\n~~~\n")
    with pytest.raises(docs.DocsError, match=r"dangling\.md, the block at line 2: .*continuation: 'echo a'"):
        docs.commands(dangling, "A")


def test_shell_lines_strips_prompts_in_any_block() -> None:
    assert docs.shell_lines(["$ echo a", "  ", "echo b", "$", "# c"]) == ["echo a", "echo b"]
    # a console block without prompts is all commands
    assert docs.shell_lines(["echo a", "echo b"], console=True) == ["echo a", "echo b"]


def test_the_readme_section_this_project_tests_is_found() -> None:
    readme = Path(__file__).parents[3] / "README.md"
    lines = docs.commands(readme, "Using an existing cluster instead")
    assert any("mlops-platform run" in line for line in lines)
