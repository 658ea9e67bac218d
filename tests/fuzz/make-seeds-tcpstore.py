#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# make-seeds-tcpstore.py: write the hand-made seeds of corpus/fuzz-tcpstore/ (seed-*).
#
# Input format of fuzz-tcpstore.c: byte 0 picks the dialect (0 = 2.0, 1 = 2.1, 2 = modern), then
# each request is preceded by one byte naming the connection (0..2) that sends it.
# Usage: tests/fuzz/make-seeds-tcpstore.py tests/fuzz/corpus/fuzz-tcpstore
import os
import struct
import sys

OPS = {
    'v20': ['SET', 'COMPARE_SET', 'GET', 'ADD', 'CHECK', 'WAIT', 'GETNUMKEYS', 'WATCH_KEY',
            'DELETE_KEY'],
    'v21': ['SET', 'COMPARE_SET', 'GET', 'ADD', 'CHECK', 'WAIT', 'GETNUMKEYS', 'DELETE_KEY',
            'APPEND', 'MULTI_GET', 'MULTI_SET', 'CANCEL_WAIT'],
    'modern': ['VALIDATE', 'SET', 'COMPARE_SET', 'GET', 'ADD', 'CHECK', 'WAIT', 'GETNUMKEYS',
               'DELETE_KEY', 'APPEND', 'MULTI_GET', 'MULTI_SET', 'CANCEL_WAIT', 'PING',
               'QUEUE_PUSH', 'QUEUE_POP', 'QUEUE_LEN', 'LIST'],
}
DIALECT_BYTE = {'v20': 0, 'v21': 1, 'modern': 2}


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack('<Q', len(b)) + b


def u64(n):
    return struct.pack('<Q', n & 0xffffffffffffffff)


class Seq:
    def __init__(self, dialect):
        self.dialect = dialect
        self.out = bytes([DIALECT_BYTE[dialect]])

    def has(self, op):
        return op in OPS[self.dialect]

    def req(self, conn, op, body=b''):
        self.out += bytes([conn, OPS[self.dialect].index(op)]) + body
        return self

    def raw(self, conn, data):
        self.out += bytes([conn]) + data
        return self

    # One helper per request layout.
    def set(self, c, k, v):
        return self.req(c, 'SET', s(k) + s(v))

    def cas(self, c, k, exp, des):
        return self.req(c, 'COMPARE_SET', s(k) + s(exp) + s(des))

    def key(self, c, op, k):
        return self.req(c, op, s(k))

    def add(self, c, k, delta):
        return self.req(c, 'ADD', s(k) + u64(delta))

    def keys(self, c, op, ks):
        return self.req(c, op, u64(len(ks)) + b''.join(s(k) for k in ks))

    def mset(self, c, kvs):
        return self.req(c, 'MULTI_SET', u64(len(kvs)) + b''.join(s(k) + s(v) for k, v in kvs))

    def kv(self, c, op, k, v):
        return self.req(c, op, s(k) + s(v))


def seeds_for(d):
    out = {}

    def seq():
        return Seq(d)

    out['set'] = seq().set(0, '/k', 'v').set(0, '/k', '').set(1, '', 'empty key').out
    out['get'] = seq().set(0, '/k', 'v').key(1, 'GET', '/k').key(1, 'GET', '/missing').out
    out['cas'] = (seq().cas(0, '/torch.rendezvous.x', '', 'Y2FuaW1hZGFt')
                  .cas(1, '/torch.rendezvous.x', 'Y2FuaW1hZGFt', 'state1')
                  .cas(2, '/torch.rendezvous.x', 'stale', 'state2')
                  .cas(0, '/none', 'expected', 'desired').out)
    out['add'] = (seq().add(0, 'init/', 1).add(1, 'init/', 1).add(2, 'init/', -5)
                  .set(0, '/n', '9223372036854775807').add(0, '/n', 1).out)
    out['add-not-decimal'] = seq().set(0, '/t', 'abc').add(0, '/t', 1).add(1, '/u', 3).out
    out['check'] = seq().set(0, '/a', '1').keys(1, 'CHECK', ['/a', '/b']).keys(1, 'CHECK', []).out
    out['wait'] = (seq().keys(1, 'WAIT', ['/a', '/b', '/a']).keys(2, 'WAIT', ['/b'])
                   .set(0, '/a', '1').add(0, '/b', 1).keys(1, 'WAIT', ['/a']).out)
    out['getnumkeys'] = seq().set(0, '/a', '1').set(0, '/b', '2').req(1, 'GETNUMKEYS').out
    out['delete'] = (seq().set(0, '/a', '1').keys(1, 'WAIT', ['/a', '/z'])
                     .key(0, 'DELETE_KEY', '/a').key(0, 'DELETE_KEY', '/a').set(0, '/z', '').out)
    if seq().has('APPEND'):
        out['append'] = seq().kv(0, 'APPEND', '/l', 'a').kv(1, 'APPEND', '/l', 'bc').out
    if seq().has('MULTI_GET'):
        out['multi'] = (seq().mset(0, [('/r/0', '[0,4]'), ('/r/1', '[4,4]')])
                        .keys(1, 'MULTI_GET', ['/r/0', '/r/1', '/r/2']).out)
    if seq().has('CANCEL_WAIT'):
        out['cancel-wait'] = (seq().keys(1, 'WAIT', ['/never']).req(1, 'CANCEL_WAIT')
                              .req(1, 'CANCEL_WAIT').set(0, '/never', 'x').out)
    if seq().has('PING'):
        out['ping'] = seq().req(0, 'PING', struct.pack('<I', 4242)).out
    if seq().has('VALIDATE'):
        out['validate'] = seq().req(0, 'VALIDATE', struct.pack('<I', 0x3C85F7CE)).out
    if seq().has('QUEUE_PUSH'):
        out['queue'] = (seq().keys(1, 'WAIT', ['/q']).keys(2, 'WAIT', ['/q'])
                        .kv(0, 'QUEUE_PUSH', '/q', 'item1').kv(0, 'QUEUE_PUSH', '/q', '')
                        .key(1, 'QUEUE_LEN', '/q').key(1, 'QUEUE_POP', '/q')
                        .key(2, 'QUEUE_POP', '/q').key(2, 'QUEUE_POP', '/q').out)
    if seq().has('LIST'):
        out['list'] = seq().set(0, '/a', '1').set(0, 'init/', '2').req(1, 'LIST').out
    if seq().has('WATCH_KEY'):
        out['watch-key'] = seq().key(0, 'WATCH_KEY', '/a').set(1, '/a', '1').out

    # A c10d rendezvous round and a worker-style barrier.
    r = seq().cas(0, '/torch.rendezvous.job', '', 'Y2FuaW1hZGFt')
    r.keys(1, 'WAIT', ['/torch.rendezvous.job']).key(1, 'GET', '/torch.rendezvous.job')
    r.cas(1, '/torch.rendezvous.job', 'Y2FuaW1hZGFt', 'state-1')
    r.add(0, '/torch.rendezvous.job.0/torchelastic/agent/terminal_state/num_members', 1)
    r.keys(2, 'WAIT', ['/torch.rendezvous.job.0/last_member'])
    r.set(0, '/torch.rendezvous.job.0/last_member', '<val_ignored>')
    out['rendezvous'] = r.out

    # Refusals: over the fuzzer's limits (key 64, value 256, 16 keys, frame 4096), unknown
    # operations, a request cut short.
    out['key-too-long'] = seq().raw(0, bytes([OPS[d].index('GET')]) + u64(65)).out
    out['value-too-long'] = seq().raw(0, bytes([OPS[d].index('SET')]) + s('k') + u64(257)).out
    out['too-many-keys'] = seq().raw(0, bytes([OPS[d].index('WAIT')]) + u64(17)).out
    out['unknown-op'] = seq().set(0, '/a', '1').raw(1, bytes([len(OPS[d])])).out
    out['truncated'] = seq().set(0, '/a', '1').raw(1, bytes([OPS[d].index('SET')]) + s('/b')
                                                    + u64(10) + b'abc').out
    big = seq()
    for i in range(12):
        big.set(i % 3, '/big/%d' % i, 'x' * 250)
    out['store-full'] = big.out
    many = seq()
    for i in range(3):
        many.keys(0, 'WAIT', ['/w/%d/%d' % (i, j) for j in range(10)])
    out['wait-keys-limit'] = many.out
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else 'corpus/fuzz-tcpstore'
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for d in OPS:
        for name, data in seeds_for(d).items():
            with open(os.path.join(outdir, 'seed-%s-%s' % (d, name)), 'wb') as f:
                f.write(data)
            n += 1
    print('%d seeds written to %s' % (n, outdir))


if __name__ == '__main__':
    main()
