import re, sys, collections
def loops(sass):
    lines = sass.splitlines()
    ins = []
    for l in lines:
        m = re.match(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
        if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
    out = []
    for addr, text in ins:
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|)\s*0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            tgt = int(m.group(1), 16)
            body = [t for a, t in ins if tgt <= a <= addr]
            out.append((tgt, addr, body))
    return out
for f in sys.argv[1:]:
    sass = open(f).read()
    for tgt, addr, body in loops(sass):
        ops = collections.Counter(re.match(r"(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", t).group(1) for t in body)
        print(f, hex(tgt), hex(addr), "loop instrs", len(body), dict(ops.most_common(16)))
