#!/usr/bin/env python3
"""No function body in fullband's own C++ is longer than 80 lines.

Scans the repository's *.h, *.cc, *.cu and *.cuh files (not build*/, .deps/, .git/,
third_party/ or node_modules/; not generated files: *.pb.h, *.pb.cc, *.grpc.pb.*, or a file
that says "DO NOT EDIT" / "@generated" in its first lines; *.inc tables are not scanned) and
prints, for every function body over the limit,
  FILE:LINE: Function is N lines (limit 80): NAME
then exits 1 if there is any. LINE is the line of the body's opening brace and N counts the
lines from that brace to the matching closing brace, both included: `void F() {` on line 10
with its `}` on line 12 is 3 lines. The signature above the brace does not count.

What counts as a function: a brace at namespace, class or file scope whose head (the tokens
since the last `;`, `{` or `}` there) has a parameter list and no `=` at its top level, e.g.
`Status Foo::Bar(int x) const {`, `Foo::Foo() : a_(1), b_{2} {` or `TEST(Suite, Name) {`
(a test body is a function). A lambda, a local class or a nested block is part of the
function it stands in. Not counted: namespace, class, struct, union and enum bodies,
`extern "C"` blocks, initializer braces (`int a[] = {...}`, `Foo kFoo{...}`, a member's
`x_{...}` in a constructor's initializer list) and CUDA device code (a head with
`__global__` or `__device__`). Comments, string and character literals (raw strings
R"d(...)d" included) and preprocessor lines are skipped before braces are matched.

usage: function_length_test.py REPOSITORY_ROOT   self-test, then scan the repository
       function_length_test.py --self-test       self-test only
"""
import io
import os
import re
import sys
import unittest

LIMIT = 80
SKIP_DIRS = {".git", ".deps", "node_modules", "third_party"}
SOURCES = (".h", ".cc", ".cu", ".cuh")
GENERATED_NAMES = re.compile(r"\.(pb|grpc\.pb)\.(h|cc)$")
GENERATED_MARK = re.compile(r"DO NOT EDIT|@generated")
ACCESS = {"public", "private", "protected"}
CLASS_KEYS = {"class", "struct", "union"}
DEVICE = {"__global__", "__device__"}
# Raw string prefixes: R"delim(...)delim", u8R"...", LR"...", uR"...", UR"...".
RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}
# Before a parameter list: not a function's name (the parentheses belong to something else).
NOT_A_NAME = {"decltype", "noexcept", "alignas", "throw", "requires", "__attribute__",
              "__declspec", "sizeof", "alignof", "static_assert"}


class Token:
    __slots__ = ("text", "line")

    def __init__(self, text, line):
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.text}@{self.line}"


def tokenize(src):
    """The tokens of `src`: identifiers, numbers, "" for a string literal, '' for a character
    literal, and single punctuation characters (`::` and `->` kept whole). Comments and
    preprocessor lines produce none."""
    tokens = []
    i, n, line = 0, len(src), 1
    at_line_start = True
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        if src.startswith("/*", i):
            end = src.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += src.count("\n", i, end)
            i = end
            continue
        if c == "#" and at_line_start:
            i, line = skip_directive(src, i, line)
            continue
        at_line_start = False
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            word = src[i:j]
            if j < n and src[j] == '"' and word in RAW_PREFIXES:
                end = raw_string_end(src, j)
                line += src.count("\n", i, end)
                tokens.append(Token('""', line))
                i = end
                continue
            if j < n and src[j] in "'\"" and word in ("u8", "u", "U", "L"):
                i = j  # an encoding prefix: the literal follows
                continue
            tokens.append(Token(word, line))
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = i + 1
            while j < n and (src[j].isalnum() or src[j] in "_.'" or
                             (src[j] in "+-" and src[j - 1] in "eEpP")):
                j += 1  # digit separators (1'000) are part of the number
            tokens.append(Token(src[i:j], line))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            tokens.append(Token(c + c, line))
            i = j + 1
            continue
        if src.startswith("::", i) or src.startswith("->", i):
            tokens.append(Token(src[i:i + 2], line))
            i += 2
            continue
        tokens.append(Token(c, line))
        i += 1
    return tokens


def skip_directive(src, i, line):
    """Skips a preprocessor line (continued by backslashes, with its comments)."""
    n = len(src)
    while i < n and src[i] != "\n":
        if src.startswith("/*", i):
            end = src.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += src.count("\n", i, end)
            i = end
        elif src.startswith("//", i):
            end = src.find("\n", i)
            return (n if end < 0 else end), line
        elif src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            line += 1
        else:
            i += 1
    return i, line


def raw_string_end(src, quote):
    """The index after the raw string whose opening quote is at `quote`."""
    paren = src.find("(", quote)
    delim = src[quote + 1:paren]
    end = src.find(")" + delim + '"', paren)
    return len(src) if end < 0 else end + len(delim) + 2


class Group:
    """A bracketed run inside a head: `(...)`, `[...]` or `{...}`, kept as one item."""
    __slots__ = ("open", "items", "line")

    def __init__(self, open_, items, line):
        self.open = open_
        self.items = items
        self.line = line

    @property
    def text(self):
        return self.open


CLOSE = {"(": ")", "[": "]", "{": "}"}


def read_group(tokens, i):
    """The Group opened at tokens[i], and the index after its closing bracket."""
    open_ = tokens[i].text
    items = []
    j = i + 1
    while j < len(tokens) and tokens[j].text != CLOSE[open_]:
        if tokens[j].text in CLOSE:
            group, j = read_group(tokens, j)
            items.append(group)
        else:
            items.append(tokens[j])
            j += 1
    return Group(open_, items, tokens[i].line), j + 1


def group_text(item):
    if isinstance(item, Group):
        inner = " ".join(group_text(x) for x in item.items)
        return item.open + inner.replace(" , ", ", ") + CLOSE[item.open]
    return item.text


def strip_prefixes(head):
    """The head without attributes, `template <...>` and access specifiers."""
    out = []
    i = 0
    while i < len(head):
        item = head[i]
        if isinstance(item, Group) and item.open == "[" and item.items and \
                isinstance(item.items[0], Group) and item.items[0].open == "[":
            i += 1  # [[attribute]]
            continue
        if item.text == "template" and i + 1 < len(head) and head[i + 1].text == "<":
            depth, i = 0, i + 1
            while i < len(head):
                depth += {"<": 1, ">": -1}.get(head[i].text, 0)
                i += 1
                if depth == 0:
                    break
            continue
        out.append(item)
        i += 1
    return out


def top_level(head):
    """The items of `head` outside template argument lists `<...>`."""
    out, depth, prev = [], 0, None
    for item in head:
        t = item.text
        if t == "<" and prev is not None and prev != "operator" and \
                (re.match(r"\w", prev) or prev == ">"):
            depth += 1
        elif t == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(item)
        prev = t if not isinstance(item, Group) else None
    return out


def classify(head):
    """What a `{` after `head` opens: 'namespace', 'class', 'function' or 'other'."""
    head = strip_prefixes(head)
    words = [x.text for x in head if not isinstance(x, Group)]
    if "namespace" in words or words[:2] == ["extern", '""']:
        return "namespace"
    if any(w in DEVICE for w in words):
        return "device"
    rest = [w for w in words if w not in ("typedef", "static", "inline", "constexpr")]
    if rest and rest[0] in CLASS_KEYS:
        return "class"
    if rest and rest[0] == "enum":
        return "other"
    items = top_level(drop_operator_symbol(head))
    if any(x.text == "=" for x in items):
        return "other"
    params = parameter_list(items)
    if params is None:
        return "other"
    after = items[params + 1:]
    if any(x.text == ":" for x in after):
        # A constructor's initializer list: `{` after a member name initializes that member.
        last = items[-1]
        if not isinstance(last, Group) and (re.match(r"\w", last.text) or last.text == ">"):
            return "other"
    return "function"


def drop_operator_symbol(head):
    """`operator()`, `operator==`, `operator new`... become one token `operator`."""
    out = []
    i = 0
    while i < len(head):
        item = head[i]
        out.append(item)
        i += 1
        if item.text != "operator":
            continue
        while i < len(head) and not (isinstance(head[i], Group) and head[i].open == "(" and
                                     not (i + 1 < len(head) and isinstance(head[i + 1], Group)
                                          and head[i + 1].open == "(" and not head[i].items)):
            i += 1
        if i < len(head) and i + 1 < len(head) and isinstance(head[i + 1], Group) and \
                head[i + 1].open == "(" and not head[i].items:
            i += 1  # operator()(...): skip the symbol's empty parentheses
    return out


def parameter_list(items):
    """The index in `items` of the parameter list's `(...)`, or None: the first parenthesized
    group after a name that is not a keyword like decltype."""
    for k, item in enumerate(items):
        if not (isinstance(item, Group) and item.open == "("):
            continue
        if k == 0:
            continue
        prev = items[k - 1]
        if isinstance(prev, Group) or prev.text in NOT_A_NAME:
            continue
        if re.match(r"[A-Za-z_~]", prev.text) or prev.text == ">":
            return k
    return None


def function_name(head):
    items = top_level(drop_operator_symbol(strip_prefixes(head)))
    k = parameter_list(items)
    if k is None:
        return "?"
    j = k - 1
    name = [items[j].text]
    while j >= 1 and not isinstance(items[j - 1], Group):
        if items[j - 1].text == "~":
            name.insert(0, "~")
            j -= 1
        elif items[j - 1].text == "::":
            name.insert(0, "::")
            j -= 1
            if j >= 1 and not isinstance(items[j - 1], Group) and re.match(r"\w", items[j - 1].text):
                name.insert(0, items[j - 1].text)
                j -= 1
        else:
            break
    text = "".join(name)
    if re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", text):  # TEST(Suite, Name) and other macros
        text += group_text(items[k])
    return text


def functions(src):
    """(name, first line, last line) of every function body in `src`."""
    tokens = tokenize(src)
    found = []
    parse_scope(tokens, 0, found)
    return found


def parse_scope(tokens, i, found):
    """Reads a namespace, class or file scope from tokens[i] to its closing `}`; returns the
    index after it."""
    head = []
    while i < len(tokens):
        t = tokens[i].text
        if t == "}":
            return i + 1
        if t == ";":
            head = []
            i += 1
        elif t == ":" and len(head) == 1 and head[0].text in ACCESS:
            head = []
            i += 1
        elif t in "([":
            group, i = read_group(tokens, i)
            head.append(group)
        elif t == "{":
            kind = classify(head)
            if kind in ("namespace", "class"):
                i = parse_scope(tokens, i + 1, found)
                head = []
                continue
            group, j = read_group(tokens, i)
            if kind in ("function", "device"):
                if kind == "function":
                    last = tokens[min(j, len(tokens)) - 1].line
                    found.append((function_name(head), tokens[i].line, last))
                head = []
            else:
                head.append(group)
            i = j
        else:
            head.append(tokens[i])
            i += 1
    return i


def is_generated(path, text):
    return GENERATED_NAMES.search(path) is not None or \
        GENERATED_MARK.search("\n".join(text.splitlines()[:5])) is not None


def source_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(d, f)


def offenders(root):
    """FILE:LINE: ... for every function over the limit under `root`."""
    out = []
    for path in source_files(root):
        text = open(path, encoding="utf-8", errors="replace").read()
        rel = os.path.relpath(path, root)
        if is_generated(rel, text):
            continue
        for name, first, last in functions(text):
            length = last - first + 1
            if length > LIMIT:
                out.append(f"{rel}:{first}: Function is {length} lines (limit {LIMIT}): {name}")
    return out


class SelfTest(unittest.TestCase):
    """The scanner on snippets: it finds function bodies and nothing else."""

    def lengths(self, src):
        return {name: last - first + 1 for name, first, last in functions(src)}

    def test_LongFunction_IsFoundWithItsLength(self):
        src = "namespace a {\nvoid Long(int x) {\n" + "  x++;\n" * 85 + "}\n}  // namespace a\n"
        self.assertEqual(self.lengths(src), {"Long": 87})

    def test_LongClassAndNamespace_AreNotFunctions(self):
        body = "  int x;\n" * 100
        src = f"namespace a {{\nclass C : public B<int> {{\n public:\n{body}}};\n" \
              f"struct S {{\n{body}}};\nenum class E : int {{\n" + "  kA,\n" * 90 + "};\n}\n"
        self.assertEqual(self.lengths(src), {})

    def test_MethodsInClass_AreFunctions(self):
        src = ("class C {\n public:\n  C() : a_(1), b_{2} {}\n  int Get() const { return a_; }\n"
               "  bool operator()(int x) const { return x; }\n  bool operator==(const C&) const"
               " { return true; }\n private:\n  int a_{0};\n  std::function<void(int)> f_{};\n};\n")
        self.assertEqual(set(self.lengths(src)), {"C", "Get", "operator", "operator"})

    def test_InitializerBraces_AreNotFunctions(self):
        src = ("const int kTable[] = {\n" + "  1,\n" * 100 + "};\nFoo kFoo{1, 2};\n"
               "const std::map<int, int> kMap = {{1, 2}};\nextern \"C\" {\nvoid F() {}\n}\n")
        self.assertEqual(self.lengths(src), {"F": 1})

    def test_CommentsStringsAndCharsWithBraces_AreSkipped(self):
        src = ('void F() {\n  // }\n  /* } */\n  const char* s = "}";\n  char c = \'}\';\n'
               '  const char* r = R"x(}\n)" })x";\n  int n = 1\'000;\n}\nvoid G() {}\n')
        self.assertEqual(self.lengths(src), {"F": 9, "G": 1})

    def test_LambdasAndLocalClasses_CountInTheirFunction(self):
        src = ("TEST(Suite, Name) {\n  auto f = [&](int x) {\n    return x;\n  };\n"
               "  struct L { int y; };\n}\n")
        self.assertEqual(self.lengths(src), {"TEST(Suite, Name)": 6})

    def test_DeviceKernels_AreLeftOut(self):
        src = ("__global__ void K(float* x) {\n" + "  x[0] = 1;\n" * 90 + "}\n"
               "template <typename T>\n__device__ T D(T x) {\n  return x;\n}\n"
               "void Host() {\n  K<<<1, 1>>>(nullptr);\n}\n")
        self.assertEqual(self.lengths(src), {"Host": 3})

    def test_TemplatesAndQualifiedNames_AreNamed(self):
        src = ("template <typename T, int N = 3>\nstd::vector<T> ns::Foo<T>::Bar(int x) const "
               "noexcept {\n  return {};\n}\nFoo::~Foo() {\n}\n#define M(x) { x }\n"
               "auto Baz() -> std::pair<int, int> {\n  return {1, 2};\n}\n")
        self.assertEqual(self.lengths(src), {"ns::Foo::Bar": 3, "Foo::~Foo": 2, "Baz": 3})

def self_test():
    """Runs SelfTest; prints its report only when a case fails."""
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
    report = io.StringIO()
    ok = unittest.TextTestRunner(stream=report, verbosity=0).run(suite).wasSuccessful()
    if not ok:
        sys.stderr.write(report.getvalue())
    return ok


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not self_test():
        print("function_length_test.py: the scanner fails its self-test", file=sys.stderr)
        return 1
    if sys.argv[1] == "--self-test":
        return 0
    errors = offenders(os.path.abspath(sys.argv[1]))
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} function(s) over {LIMIT} lines: split them into helpers",
              file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
