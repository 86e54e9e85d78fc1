"""ckpt_cut.py ONE_FILE OUT_DIR: cut a one-file cltrain checkpoint into a
sharded one by the format doc/checkpoint.md gives ("Sharded checkpoints"),
written here rather than by cltrain: 3 uneven shards, one of them holding two
ranges far apart, the index (OUT_DIR/cut.safetensors) naming them out of
order. For tests/train/ckpt_shards.sh: it must load as the file it was cut
from."""
import json
import os
import struct
import sys
import zlib


def header_crc(h):
    return '%08x' % zlib.crc32(json.dumps(h, separators=(',', ':'), sort_keys=True).encode())


def write(path, tensors, meta):
    data, h, at = b'', {}, 0
    for name, raw in tensors:
        h[name] = {'dtype': 'F32', 'shape': [len(raw) // 4], 'data_offsets': [at, at + len(raw)]}
        data += raw
        at += len(raw)
    meta = dict(meta, data_bytes=str(len(data)), data_crc32='%08x' % zlib.crc32(data))
    h['__metadata__'] = meta
    meta['header_crc32'] = header_crc(h)
    hb = json.dumps(h).encode()
    hb += b' ' * (-len(hb) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(hb)) + hb + data)
    return meta


def main(src, out):
    os.mkdir(out)
    b = open(src, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    meta = json.loads(b[8:8 + n])['__metadata__']
    data, P = b[8 + n:], int(meta['param_count'])
    # a one-file checkpoint's data: the parameters in layer order, then each slot alike
    ncomp = len(data) // (4 * P)
    slots = {1: ['momentum'], 2: ['m', 'v']}.get(ncomp - 1, [])
    comp = [data[4 * P * c:4 * P * (c + 1)] for c in range(ncomp)]
    cuts = {'c': [[0, 7], [P - 100, 100]], 'a': [[7, 500]], 'b': [[507, P - 607]]}
    files = []
    for name in ['b', 'c', 'a']:
        r = cuts[name]
        t = [('params' if c == 0 else 'optim/' + slots[c - 1],
              b''.join(comp[c][4 * f:4 * (f + k)] for f, k in r)) for c in range(ncomp)]
        f = 'cut.x.shard-%s.safetensors' % name
        m = write(os.path.join(out, f), t,
                  {'format': 'cltrain-checkpoint-shard', 'format_version': '2', 'ranges': json.dumps(r)})
        files.append({'file': f, 'ranges': r, 'data_bytes': int(m['data_bytes']), 'data_crc32': m['data_crc32']})
    for k in ('data_bytes', 'data_crc32', 'header_crc32'):
        meta.pop(k)
    meta['format_version'] = '2'
    meta['shards'] = json.dumps({'files': files, 'save': 'x', 'slots': slots})
    write(os.path.join(out, 'cut.safetensors'), [], meta)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
