#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A strict check of the Prometheus text exposition format (0.0.4).

usage: check-prometheus.py ZAP_PERF      run zap-perf --loopback --metrics
                                         and check what it prints
       check-prometheus.py --file PATH   check a file (- for stdin)

The grammar, as https://prometheus.io/docs/instrumenting/exposition_formats/
gives it: lines end with \\n; "# HELP name docstring" (docstring escapes
only \\\\ and \\n), "# TYPE name type" (counter, gauge, histogram, summary,
untyped), other "#" lines are comments; a sample is
name[{label="value",...}] value [timestamp], names [a-zA-Z_:][a-zA-Z0-9_:]*,
label names [a-zA-Z_][a-zA-Z0-9_]* not starting with __, label values
escaping only \\\\, \\" and \\n. Stricter than the format where a
parser would reject the document: at most one HELP and one TYPE per
family, both before its samples; a family's samples contiguous; no series
(name and label set) twice; no label twice in a sample. And, for what
libzap renders: every family typed, counters named *_total, values whole
numbers except *_seconds.
"""
import json
import math
import re
import subprocess
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
LVALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
FLOAT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Inf|NaN)"
SAMPLE = re.compile(r"(%s)(?:\{((?:%s=%s)(?:,%s=%s)*,?)?\})? (%s)(?: (-?[0-9]+))?" %
                    (NAME, LABEL, LVALUE, LABEL, LVALUE, FLOAT))
PAIR = re.compile(r"(%s)=(%s)" % (LABEL, LVALUE))
HELP = re.compile(r"# HELP (%s) ((?:[^\\\n]|\\[\\n])*)" % NAME)
TYPE = re.compile(r"# TYPE (%s) (counter|gauge|histogram|summary|untyped)" % NAME)


def unescape(v):
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v[1:-1])


def family_of(name, types):
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def check(text):
    """The samples, as {(name, frozenset(labels)): value}; raises on a fault."""
    errors = []
    if text and not text.endswith("\n"):
        errors.append("the text does not end with a newline")
    helps, types, done, series = {}, {}, set(), {}
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d: %r" % (n, line)
        if line.startswith("# HELP "):
            m = HELP.fullmatch(line)
            if not m:
                errors.append("%s: malformed HELP" % where)
                continue
            if m.group(1) in helps:
                errors.append("%s: second HELP for %s" % (where, m.group(1)))
            if m.group(1) in done:
                errors.append("%s: HELP after the samples of %s" % (where, m.group(1)))
            helps[m.group(1)] = m.group(2)
        elif line.startswith("# TYPE "):
            m = TYPE.fullmatch(line)
            if not m:
                errors.append("%s: malformed TYPE" % where)
                continue
            if m.group(1) in types:
                errors.append("%s: second TYPE for %s" % (where, m.group(1)))
            if m.group(1) in done:
                errors.append("%s: TYPE after the samples of %s" % (where, m.group(1)))
            types[m.group(1)] = m.group(2)
        elif line.startswith("#"):
            continue  # a comment
        elif not line.strip():
            errors.append("%s: blank line" % where)
        else:
            m = SAMPLE.fullmatch(line)
            if not m:
                errors.append("%s: not a sample" % where)
                continue
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            fam = family_of(name, types)
            if fam != current:
                if fam in done:
                    errors.append("%s: samples of %s are not contiguous" % (where, fam))
                if current is not None:
                    done.add(current)
                current = fam
            pairs = PAIR.findall(labels)
            names = [k for k, _ in pairs]
            if len(set(names)) != len(names):
                errors.append("%s: a label twice" % where)
            if any(k.startswith("__") for k in names):
                errors.append("%s: reserved label name" % where)
            key = (name, frozenset((k, unescape(v)) for k, v in pairs))
            if key in series:
                errors.append("%s: the same series twice" % where)
            # libzap's own rules
            if fam not in types:
                errors.append("%s: %s has no TYPE" % (where, fam))
            elif types[fam] == "counter" and not name.endswith("_total"):
                errors.append("%s: counter %s not named *_total" % (where, name))
            v = float(value)
            if math.isnan(v) or v < 0:
                errors.append("%s: negative or NaN" % where)
            if not name.endswith("_seconds") and not re.fullmatch(r"[0-9]+", value):
                errors.append("%s: not a whole number" % where)
            series[key] = v
    if errors:
        raise SystemExit("\n".join(errors[:40]))
    return series


def by(series, name, **want):
    """{endpoint: value} of @name's samples whose labels include @want."""
    out = {}
    for (n, labels), v in series.items():
        d = dict(labels)
        if n == name and all(d.get(k) == w for k, w in want.items()):
            out[d["endpoint"]] = v
    return out


def self_test():
    """The checker refuses what it must."""
    good = '# HELP a_total x\n# TYPE a_total counter\na_total{l="\\"\\\\\\n"} 1\n'
    check(good)
    bad = [
        good + '# TYPE a_total counter\n',          # TYPE twice
        good + 'a_total{l="x"} 1\n# HELP b x\n# TYPE b gauge\nb 1\na_total 2\n',
        '# TYPE a gauge\na{l="\\x"} 1\n',              # bad escape
        '# TYPE a gauge\na{l="x",l="y"} 1\n',          # label twice
        '# TYPE a gauge\na 1\na 2\n',                  # series twice
        '# TYPE a gauge\na{1l="x"} 1\n',               # bad label name
        '# TYPE a gauge\na 1',                         # no final newline
        '# TYPE a counter\na 1\n',                     # counter not *_total
        'a 1\n',                                       # untyped (ours are typed)
        '# TYPE a gauge\na 1.5\n',                     # not whole
        '# TYPE a gauge\n\na 1\n',                     # blank line
    ]
    for b in bad:
        try:
            check(b)
        except SystemExit:
            continue
        raise SystemExit("the checker accepted %r" % b)


def main():
    self_test()
    if sys.argv[1:2] == ["--file"]:
        text = sys.stdin.read() if sys.argv[2] == "-" else open(sys.argv[2]).read()
        check(text)
        print("ok")
        return
    perf = sys.argv[1]
    cmd = [perf, "--loopback", "--json", "--metrics", "--transport", "default",
           "--sizes", "64,4K", "--iters", "20", "--msgs", "300", "--bytes", "1M",
           "--window", "8", "--warmup", "2"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=50, check=True)
    doc = json.loads(out.stdout)
    text = doc["metrics"]
    series = check(text)
    sent = by(series, "zap_messages_sent_total")
    recv = by(series, "zap_messages_received_total")
    assert len(sent) == 2, sent  # both ends
    client = [e for e, v in by(series, "zap_connections_dialed_total").items() if v == 1]
    server = [e for e, v in by(series, "zap_connections_accepted_total").items() if v == 1]
    assert len(client) == 1 and len(server) == 1, (client, server)
    c, s = client[0], server[0]
    # The server rendered after taking every message the client sent
    # (the metrics request included); the client took one more than the
    # server had sent then: the metrics themselves.
    assert sent[c] == recv[s], (sent, recv)
    assert recv[c] == sent[s] + 1, (sent, recv)
    bsent = by(series, "zap_bytes_sent_total")
    brecv = by(series, "zap_bytes_received_total")
    assert bsent[c] == brecv[s], (bsent, brecv)
    # Every close reason is listed, none happened; one peer each.
    assert all(v == 0 for v in by(series, "zap_connections_closed_total").values())
    reasons = {dict(l)["reason"] for (n, l) in series if n == "zap_connections_closed_total"}
    assert {"idle", "stall", "evicted", "peer_reset", "peer_eof", "protocol",
            "oversize", "tls", "identity", "shutdown"} <= reasons, reasons
    assert by(series, "zap_peers") == {c: 1, s: 1}
    peer_tx = by(series, "zap_peer_messages_sent_total", peer=s)
    assert peer_tx == {c: sent[c]}, peer_tx
    print("ok: %d samples from both ends" % len(series))


if __name__ == "__main__":
    main()
