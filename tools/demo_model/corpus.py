"""The training text of the demo model: the Python standard library's own source (PSF licence), found on the
machine that trains, recorded exactly (file list, sizes, one SHA-256 over paths and contents).

Files are split into documents at top-level `def` / `class` statements, so that a prompt such as
"def fibonacci(n):" right after <BOS_TOKEN> looks like the start of a training document. About one file in
twenty (chosen by a hash of its path, so the choice does not depend on the machine) is held out for validation
loss and for golden prompts the model never saw. Pure standard library: runs anywhere.
"""
import ast
import hashlib
import os
import sysconfig
import textwrap
from dataclasses import dataclass, field

# Folders left out: tests are repetitive, and installed third-party packages are not the standard library.
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}
VAL_EVERY = 20


@dataclass
class SourceFile:
    path: str  # relative to the standard library's folder
    text: str
    is_val: bool


@dataclass
class Corpus:
    root: str
    files: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (path, reason)
    sha256: str = ""

    def total_bytes(self):
        return sum(len(f.text.encode("utf-8")) for f in self.files)

    def record(self):
        """What the training report keeps of the corpus."""
        return {
            "source": "the Python standard library's .py files (" + self.root + "), without " +
                      ", ".join(sorted(SKIP_DIRS)),
            "num_files": len(self.files),
            "num_bytes": self.total_bytes(),
            "num_val_files": sum(f.is_val for f in self.files),
            "sha256": self.sha256,
            "sha256_of": "for each file in path order: path, NUL, UTF-8 bytes, NUL",
            "skipped": self.skipped,
            "files": [[f.path, len(f.text.encode("utf-8")), "val" if f.is_val else "train"] for f in self.files],
        }


def stdlib_root():
    return sysconfig.get_paths()["stdlib"]


def is_val_path(path):
    return int(hashlib.sha256(path.encode("utf-8")).hexdigest()[:8], 16) % VAL_EVERY == 0


def load(root=None):
    root = root or stdlib_root()
    corpus = Corpus(root=root)
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            if name.endswith(".py"):
                paths.append(os.path.relpath(os.path.join(dirpath, name), root))
    digest = hashlib.sha256()
    for path in sorted(paths):
        with open(os.path.join(root, path), "rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            corpus.skipped.append([path, "not UTF-8: " + str(e)])
            continue
        digest.update(path.encode("utf-8") + b"\0" + data + b"\0")
        corpus.files.append(SourceFile(path, text, is_val_path(path)))
    corpus.sha256 = digest.hexdigest()
    return corpus


# --- documents -----------------------------------------------------------------------------------------------

def split_top_level(text):
    """The file cut before each top-level def / class (decorators included); the module header is the first
    piece. A file that does not parse stays whole."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return [text]
    lines = text.splitlines(keepends=True)
    cuts = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            cuts.append(first - 1)
    starts = sorted(set([0] + cuts))
    pieces = []
    for begin, end in zip(starts, starts[1:] + [len(lines)]):
        piece = "".join(lines[begin:end]).strip("\n")
        if piece.strip():
            pieces.append(piece + "\n")
    return pieces


def documents(files):
    """Plain-text documents of `files`, in file order."""
    docs = []
    for f in files:
        docs.extend(split_top_level(f.text))
    return docs


def chat_pairs(files, max_source_chars=1500):
    """(user, assistant) pairs for a little chat-formatted training text: the first line of a top-level
    function's docstring as the request, the function's source as the answer."""
    pairs = []
    for f in files:
        try:
            tree = ast.parse(f.text)
        except (SyntaxError, ValueError):
            continue
        lines = f.text.splitlines(keepends=True)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.decorator_list or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            summary = doc.strip().split("\n")[0].strip() if doc else ""
            if len(summary) < 12:
                continue
            source = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno])).strip("\n")
            if len(source) > max_source_chars:
                continue
            pairs.append(("Write a Python function " + node.name + ": " + summary, source))
    return pairs
