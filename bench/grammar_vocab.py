#!/usr/bin/env python3
"""Writes a synthetic 256,000-token byte-level BPE tokenizer folder for bench/grammar_bench.cpp.

A real Command R vocabulary (255K byte-level BPE tokens) is not in the repository (too large); this one has
the same size and a similar make-up: the pieces of text found on this machine (English documentation, man
pages, Python and C sources: words with and without a leading space, punctuation runs such as `",` `"}`
`":"`, whitespace runs), CJK and Hangul characters, words of other scripts, every byte, and every prefix of
every token (so partial UTF-8 tokens occur, as in real vocabularies). The tokenizer.json copies the
pre-tokenizer, decoder, normalizer and added tokens of a template (tests/fixtures/cohere2-tiny); merges
extend a token by one byte-level character, so BPE encoding runs.

usage: grammar_vocab.py OUT_DIR [--size 256000] [--template DIR]
"""
import argparse, collections, glob, gzip, json, os, random, re, shutil

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d| ?[^\s\w]+|\s+(?!\S)|\s+")

def corpus(limit):
    files = glob.glob("/usr/share/doc/**/*", recursive=True) + glob.glob("/usr/share/man/man*/*.gz") \
        + glob.glob("/usr/lib/python3*/**/*.py", recursive=True) + glob.glob("/usr/include/**/*.h", recursive=True)
    random.Random(0).shuffle(files)
    total = 0
    for f in files:
        if total > limit or not os.path.isfile(f):
            continue
        try:
            data = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
            text = data.decode("utf-8")
        except Exception:
            continue
        total += len(text)
        yield text

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=256000)
    ap.add_argument("--template", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "cohere2-tiny"))
    ap.add_argument("--corpus-chars", type=int, default=60_000_000)
    args = ap.parse_args()
    b2u = bytes_to_unicode()
    enc = lambda s: "".join(b2u[b] for b in s.encode("utf-8"))
    counts = collections.Counter()
    for text in corpus(args.corpus_chars):
        counts.update(PIECE.findall(text))
    rng = random.Random(1)
    extra = [chr(c) for c in range(0x4E00, 0x9FA6)] + [chr(c) for c in range(0xAC00, 0xAC00 + 2350)]
    for lo, hi in [(0x0410, 0x044F), (0x03B1, 0x03C9), (0x0627, 0x064A), (0x0905, 0x0939), (0x00E0, 0x00FF)]:
        letters = [chr(c) for c in range(lo, hi + 1)]
        for _ in range(6000):
            w = "".join(rng.choice(letters) for _ in range(rng.randint(2, 8)))
            extra += [w, " " + w]
    tokens, seen = [], set()
    def add(t):
        if t and t not in seen:
            seen.add(t)
            tokens.append(t)
    t = json.load(open(os.path.join(args.template, "tokenizer.json")))
    added = t["added_tokens"]
    for b in range(256):
        add(b2u[b])
    for piece, _ in counts.most_common():
        for text in ([piece] if len(piece) < 24 else []):
            e = enc(text)
            for k in range(1, len(e) + 1):
                add(e[:k])
        if len(tokens) >= args.size * 0.8:
            break
    for w in extra:
        e = enc(w)
        for k in range(1, len(e) + 1):
            add(e[:k])
        if len(tokens) >= args.size - len(added):
            break
    tokens = tokens[: args.size - len(added)]
    vocab = {a["content"]: a["id"] for a in added}
    next_id = max(vocab.values()) + 1
    for tok in tokens:
        if tok not in vocab:
            vocab[tok] = next_id
            next_id += 1
    merges = [[tok[:-1], tok[-1]] for tok in tokens if len(tok) > 1 and tok[:-1] in vocab]
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    os.makedirs(args.out, exist_ok=True)
    json.dump(t, open(os.path.join(args.out, "tokenizer.json"), "w"), ensure_ascii=False)
    shutil.copy(os.path.join(args.template, "tokenizer_config.json"), args.out)
    print(f"{len(vocab)} tokens, {len(merges)} merges from {sum(counts.values())} pieces -> {args.out}")

if __name__ == "__main__":
    main()
