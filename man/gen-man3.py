#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the section 3 manual pages of libzap's API from <zap/zap.h>.

Every function the header declares with ZAP_EXPORT gets a page, made from
the doc comment above it (the kernel-doc form the header uses):

    /**
     * name() - what it does, first sentence.
     * @arg: what the argument is.
     *
     * More paragraphs; lines indented by two or more are kept as they are.
     *
     * Return: what it returns, with the error codes, one per line
     *  -ECODE: when.
     */

NAME comes from the first sentence, SYNOPSIS from the declaration (with the
definitions of the structures, enums and callback types it names),
DESCRIPTION from the rest, RETURN VALUE from "Return:" (a function without
one returns no value, or what its first sentence says), SEE ALSO from the
other functions of the same part of the header.

  gen-man3.py --list HEADER            print the page names, one per line
  gen-man3.py HEADER OUTDIR VERSION    write OUTDIR/<function>.3 for each
"""
import os
import re
import sys

ERRNO_ITEM = re.compile(r"^\s+((?:-E[A-Z0-9]+|ZAP_ENOTAVAIL)(?:/-E[A-Z0-9]+)*)(?::|;)\s*(.*)$")
PARAM = re.compile(r"^@(\w+(?:, @\w+)*):\s*(.*)$")


def parse(text):
    """[(section, name, decl, comment lines)], {type name: definition}."""
    funcs, types = [], {}
    section = ""
    lines = text.split("\n")
    i = 0
    comment = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^/\* ([A-Z][^*]*?)\s+\*/$", line)
        if m and "----" not in line:
            section = m.group(1)
        if line.startswith("/**"):
            body = []
            first = line.strip()[3:]
            while True:
                end = "*/" in first
                text = first.split("*/")[0].rstrip()
                if text.strip():
                    body.append(text.strip() if not body else text)
                if end:
                    break
                i += 1
                first = re.sub(r"^ \*( |$)", "", lines[i])
                if first.strip().startswith("*/"):
                    break
            comment = body
            i += 1
            continue
        if line.startswith("ZAP_EXPORT"):
            decl = [line]
            while not decl[-1].rstrip().endswith(";"):
                i += 1
                decl.append(lines[i])
            d = " ".join(x.strip() for x in decl)
            d = d.replace("ZAP_EXPORT ", "")
            name = re.search(r"(\w+)\s*\(", d).group(1)
            funcs.append((section, name, decl, comment or []))
            comment = None
        elif re.match(r"^(struct|enum) \w+ \{", line):
            name = re.match(r"^((?:struct|enum) \w+)", line).group(1)
            body = [line]
            while not body[-1].startswith("}"):
                i += 1
                body.append(lines[i])
            types[name] = body
            comment = None
        elif line.startswith("typedef"):
            body = [line]
            while not body[-1].rstrip().endswith(";"):
                i += 1
                body.append(lines[i])
            name = re.search(r"\(\*(\w+)\)", line).group(1)
            types[name] = body
            comment = None
        elif line.startswith("#define ZAP_") and comment is not None:
            comment = None
        i += 1
    return funcs, types


def esc(s):
    """Roff text: backslashes, and minus signs before error codes."""
    s = s.replace("\\", "\\e")
    s = re.sub(r"(?<![\w-])-(E[A-Z0-9]+)", r"\\-\1", s)
    return s


def inline(s):
    """Text of a paragraph: arguments in italics, functions in bold."""
    s = esc(s)
    s = re.sub(r"@(\w+)", r"\\fI\1\\fP", s)
    s = re.sub(r"\b(zap_\w+)\(\)", r"\\fB\1\\fP()", s)
    return s


def line_out(s):
    """One output line: never starting with a control character."""
    return "\\&" + s if s[:1] in (".", "'") else s


def literal(lines):
    """A block kept as written (code, tables)."""
    base = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    out = [".PP", ".RS 4", ".nf"]
    out += ["\\&" + esc(x[base:]) if x.strip() else "" for x in lines]
    out += [".fi", ".RE"]
    return out


def render(body):
    """Comment lines (no "name() -" line) as roff."""
    out = []
    para = []  # words of the running paragraph
    item = None  # {tag, indent of the tag, of its text, segments}
    block = []  # literal lines at paragraph level

    def flush_para():
        nonlocal para
        if para:
            out.append(".PP")
            out.append(line_out(inline(" ".join(para))))
            para = []

    def flush_item():
        nonlocal item
        if item:
            out.append(".TP")
            out.append(line_out(item["tag"]))
            first = True
            for kind, lines in item["segs"]:
                if kind == "text":
                    if not first:
                        out.append(".IP")
                    out.append(line_out(inline(" ".join(lines))))
                else:
                    # Indented as the item's text, kept as written.
                    base = min(len(x) - len(x.lstrip()) for x in lines)
                    out.extend(([] if first else [".IP"]) + [".nf"])
                    out.extend("\\&" + esc(x[base:]) for x in lines)
                    out.append(".fi")
                first = False
            item = None

    def flush_block():
        nonlocal block
        if block:
            out.extend(literal(block))
            block = []

    def add(kind, line):
        segs = item["segs"]
        if not segs or segs[-1][0] != kind:
            segs.append((kind, []))
        segs[-1][1].append(line)

    prev_colon = False
    for raw in body:
        indent = len(raw) - len(raw.lstrip())
        text = raw.strip()
        if not text:
            flush_item()
            flush_para()
            flush_block()
            prev_colon = False
            continue
        m = PARAM.match(raw)
        e = ERRNO_ITEM.match(raw)
        if m or (e and indent <= 2 and not block):
            flush_item()
            flush_para()
            flush_block()
            if m:
                tag = ", ".join("\\fI%s\\fP" % a.strip().lstrip("@")
                                for a in m.group(1).split(","))
                first = m.group(2)
            else:
                tag = "\\fB%s\\fP" % esc(e.group(1))
                first = e.group(2)
            item = {"tag": tag, "at": indent, "text": None, "segs": []}
            if first:
                add("text", first)
        elif item is not None and indent > item["at"]:
            # A continuation, or a table under it (deeper than its text).
            if item["text"] is None:
                item["text"] = indent
            if indent >= item["text"] + 2:
                add("lit", raw)
            else:
                add("text", text)
        elif indent >= 2 and (block or prev_colon or not para):
            flush_item()
            flush_para()
            block.append(raw)
        else:
            flush_item()
            flush_block()
            para.append(text)
        prev_colon = text.endswith(":")
    flush_item()
    flush_para()
    flush_block()
    return out


def split_comment(name, comment):
    """(summary sentence, description lines, return lines or None)."""
    lines = list(comment)
    head = []
    while lines and lines[0].strip() and not PARAM.match(lines[0]) \
            and not lines[0].startswith("Return:"):
        head.append(lines.pop(0).strip())
    first = " ".join(head)
    first = re.sub(r"^%s\(\)\s*-\s*" % re.escape(name), "", first)
    m = re.match(r"(.+?\.)(\s+([A-Z].*))?$", first)
    summary, rest = (m.group(1), m.group(3) or "") if m else (first, "")
    if rest:
        lines.insert(0, rest)
    ret = None
    for k, x in enumerate(lines):
        if x.startswith("Return:"):
            ret = [x[len("Return:"):].strip()] + lines[k + 1:]
            lines = lines[:k]
            break
    summary = summary.rstrip(".")
    # NAME is one short line: a long first sentence loses its parenthesis
    # there and is given whole as the description's first paragraph.
    cuts = [summary.index(c) for c in (": ", " (") if c in summary]
    if len(summary) > 72 and cuts:
        lines = [summary[0].upper() + summary[1:] + ".", ""] + lines
        summary = summary[:min(cuts)]
    return summary, lines, ret


def types_named(decl, types):
    d = " ".join(decl)
    found = []
    for t in types:
        key = t if not t.startswith(("struct ", "enum ")) else t
        if re.search(r"\b%s\b" % re.escape(key), d):
            found.append(t)
    return found


def page(section, name, decl, comment, funcs, types, version):
    summary, desc, ret = split_comment(name, comment)
    rtype = decl[0].replace("ZAP_EXPORT ", "").split(name)[0].strip()
    out = [
        ".\\\" SPDX-License-Identifier: MIT",
        ".\\\" Generated by man/gen-man3.py from include/zap/zap.h: edit the header.",
        '.TH %s 3 "" "libzap %s" "libzap Programmer\'s Manual"' % (name.upper(), version),
        ".\\\" error codes and names are not to be hyphenated",
        ".nh",
        ".SH NAME",
        "%s \\- %s" % (esc(name), esc(re.sub(r"@(\w+)", r"\1", summary))),
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <zap/zap.h>",
    ]
    for t in types_named(decl, types):
        out.append("")
        out += ["\\&" + esc(x.expandtabs(8)) for x in types[t]]
    out.append("")
    first = decl[0].replace("ZAP_EXPORT ", "")
    cont = [x.strip() for x in decl[1:]]
    pad = " " * (first.index("(") + 1)
    out.append("\\&\\fB" + esc(first) + "\\fP")
    out += ["\\&\\fB" + pad + esc(x) + "\\fP" for x in cont]
    out += [".fi", ".PP", "Compile and link with", "\\fBpkg\\-config \\-\\-cflags \\-\\-libs zap\\fP."]
    out.append(".SH DESCRIPTION")
    body = render(desc)
    if body and body[0] == ".PP":
        body = body[1:]
    if not body:
        body = [line_out(inline(summary[0].upper() + summary[1:] + "."))]
    out += body
    out.append(".SH RETURN VALUE")
    if ret is not None:
        r = render(ret)
        if r and r[0] == ".PP":
            r = r[1:]
        out += r
    elif rtype == "void":
        out.append("\\fB%s\\fP() returns no value." % esc(name))
    else:
        out.append("\\fB%s\\fP() returns %s." % (esc(name), inline(summary)))
    out.append(".SH SEE ALSO")
    related = [f for s, f, _, _ in funcs if s == section and f != name]
    refs = ["\\fB%s\\fP(3)" % esc(f) for f in related] + ["\\fBlibzap\\fP(7)"]
    out.append(",\n".join(refs))
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "--list":
        funcs, _ = parse(open(argv[2]).read())
        for f in funcs:
            print(f[1] + ".3")
        return 0
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    funcs, types = parse(open(argv[1]).read())
    for section, name, decl, comment in funcs:
        if not comment:
            sys.stderr.write("gen-man3: %s has no doc comment\n" % name)
            return 1
        text = page(section, name, decl, comment, funcs, types, argv[3])
        with open(os.path.join(argv[2], name + ".3"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
