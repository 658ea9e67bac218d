#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# make-seeds-rendezvous.py: write the hand-made seeds of corpus/fuzz-rendezvous/ (seed-*).
#
# Input format of fuzz-rendezvous.c: a byte stream of rendezvous frames as one peer sends them
# (proto/RENDEZVOUS.md): u8 op, u8 version (1), u16 reserved (0), u32 LE body length, JSON body.
# Valid messages of every type (one file each, plus whole conversations), then malformed ones.
# Usage: tests/fuzz/make-seeds-rendezvous.py tests/fuzz/corpus/fuzz-rendezvous
import json
import os
import struct
import sys

OPS = {
    'HELLO': 0xA0, 'JOIN': 0xA2, 'JOINED': 0xA3, 'ROUND': 0xA4, 'NCCL_REQUEST': 0xA5,
    'NCCL_ID': 0xA6, 'HEARTBEAT': 0xA7, 'WORKER_EXIT': 0xA8, 'EVENT': 0xA9, 'LEAVE': 0xAA,
    'READY': 0xAB, 'AUTH': 0xAC, 'AUTH_OK': 0xAD, 'STORE': 0xAE, 'ERROR': 0xAF, 'STATUS': 0xB0,
    'STATUS_REPLY': 0xB1, 'REPLICA': 0xB2, 'REPLICAS': 0xB3,
}
NCCL_HEX = '0123456789abcdef' * 16  # 256 lowercase hex characters


def frame(op, body, version=1, reserved=0, length=None):
    if not isinstance(body, bytes):
        body = json.dumps(body, separators=(',', ':')).encode()
    op = OPS[op] if isinstance(op, str) else op
    n = len(body) if length is None else length
    return struct.pack('<BBHI', op, version, reserved, n) + body


STATUS_NODE = {'host': 'nodeA', 'node_id': 'nodeA-1234-1', 'node_rank': 0, 'workers': 4,
               'last_heartbeat_age_s': 0.25, 'age_s': 12.5, 'failures': 1, 'spare': False,
               'connected': True, 'state': 'running'}
STATUS_JOB = {'run_id': 'job1', 'state': 'ended', 'generation': 2, 'restart_count': 1,
              'max_restarts': 3, 'min_nodes': 1, 'max_nodes': 2, 'nodes_in_generation': 1,
              'world_size': 4, 'age_s': 20.5, 'store_port': 41234,
              'nodes': [STATUS_NODE, dict(STATUS_NODE, node_rank=-1, spare=True, state='spare')],
              'events': [{'time': 1700000000.5, 'text': 'generation 1: 2 node(s)'}],
              'outcome': {'type': 'succeeded', 'exit_code': 0, 'summary': 'done'}}
STATUS_REPLY = {'daemon': 'rdzvd', 'version': '0.1.0', 'port': 29400, 'uptime_s': 30.5,
                'stats': {'connections': 3, 'accepted': 4, 'rejected': 0, 'protocol_errors': 1,
                          'requests': 10, 'main_store_keys': 2},
                'jobs': [STATUS_JOB]}
HELLO = {'magic': 'rdzv', 'version': 1, 'peer': 'rdzv-agent 0.1.0'}
JOIN = {'run_id': 'job1', 'node_id': 'nodeA-1234-1', 'host': 'nodeA', 'nproc': 4,
        'node_rank': -1, 'min': 2, 'max': 4, 'last_call_ms': 3000, 'max_restarts': 3,
        'nccl': 'auto', 'nccl_ids': 1, 'rank_hint': False, 'heartbeat_timeout_ms': 5000,
        'join_timeout_ms': 600000, 'scale_up_now': False}
RESUME = {'generation': 3, 'node_rank': 1, 'nnodes': 2, 'rank_offset': 4, 'world_size': 8,
          'restart_count': 2, 'master_port': 41234, 'left': False}
ROUND = {'generation': 1, 'node_rank': 0, 'nnodes': 2, 'rank_offset': 0, 'world_size': 8,
         'master_addr': '10.0.0.1', 'master_port': 29501, 'restart_count': 0,
         'max_restarts': 3, 'nccl_ids': [NCCL_HEX]}
WORKER_EXIT = {'generation': 1, 'rank': 5, 'local_rank': 1, 'exit_code': 7, 'signal': 0,
               'time': 1763784970.25, 'host': 'nodeB'}
EVENT = {'type': 'failed', 'generation': 1, 'exit_code': 7,
         'summary': 'root cause: worker rank 5 (local rank 1) on node rank 1 (nodeB) exited '
                    'with code 7 at 2026-11-22T04:16:50Z'}


def with_(d, **kw):
    o = dict(d)
    for k, v in kw.items():
        if v is None:
            o.pop(k, None)
        else:
            o[k] = v
    return o


def seeds():
    out = {}
    # One valid message of each type.
    out['hello'] = frame('HELLO', HELLO)
    out['join'] = frame('JOIN', JOIN)
    out['join-minimal'] = frame('JOIN', {k: JOIN[k] for k in (
        'run_id', 'node_id', 'host', 'nproc', 'node_rank', 'min', 'max', 'last_call_ms',
        'max_restarts')})
    out['join-resume'] = frame('JOIN', with_(JOIN, resume=RESUME, rank_hint=True, node_rank=1))
    out['join-resume-left'] = frame('JOIN', with_(JOIN, resume=with_(RESUME, left=True),
                                                  nccl='required', nccl_ids=4,
                                                  scale_up_now=True))
    out['joined'] = frame('JOINED', {'run_id': 'job1', 'waiting': 1, 'spare': False,
                                     'resumed': True})
    out['round'] = frame('ROUND', ROUND)
    out['round-no-ids'] = frame('ROUND', with_(ROUND, nccl_ids=[], master_addr='::1'))
    out['round-many-ids'] = frame('ROUND', with_(ROUND, nccl_ids=[NCCL_HEX] * 3))
    out['nccl-request'] = frame('NCCL_REQUEST', {'generation': 1, 'count': 2})
    out['nccl-id'] = frame('NCCL_ID', {'generation': 1, 'ids': [NCCL_HEX, NCCL_HEX]})
    out['nccl-id-error'] = frame('NCCL_ID', {'generation': 1, 'error': 'libnccl.so.2: not found'})
    out['heartbeat'] = frame('HEARTBEAT', {'generation': 2})
    out['worker-exit'] = frame('WORKER_EXIT', WORKER_EXIT)
    out['worker-exit-signal'] = frame('WORKER_EXIT', with_(WORKER_EXIT, exit_code=137, signal=9,
                                                           time=None, host=None))
    out['event'] = frame('EVENT', EVENT)
    out['event-restart'] = frame('EVENT', {'type': 'restart', 'generation': 2})
    out['event-succeeded'] = frame('EVENT', with_(EVENT, type='succeeded', exit_code=0,
                                                  summary='every worker of every node exited 0'))
    out['leave'] = frame('LEAVE', {'generation': 1, 'status': 'succeeded'})
    out['ready'] = frame('READY', {'generation': 1})
    out['error'] = frame('ERROR', {'error': "node rank 1 is taken in job 'job1'"})
    out['joined-full'] = frame('JOINED', {'run_id': 'job1', 'waiting': 3, 'spare': True,
                                          'resumed': False, 'generation': 4})
    out['joined-empty'] = frame('JOINED', {})
    out['nccl-request-max'] = frame('NCCL_REQUEST', {'generation': 7, 'count': 64})
    out['nccl-id-max'] = frame('NCCL_ID', {'generation': 3, 'ids': [NCCL_HEX] * 64})
    out['leave-failed'] = frame('LEAVE', {'generation': 1, 'status': 'failed'})
    out['heartbeat-big-gen'] = frame('HEARTBEAT', {'generation': 18446744073709551615})
    out['heartbeat-progress'] = frame('HEARTBEAT', {'generation': 2, 'progress': [
        {'local_rank': 1, 'step': 1234, 'age_ms': 250}, {'local_rank': 0, 'step': 0, 'age_ms': 0}]})
    out['heartbeat-progress-dup'] = frame('HEARTBEAT', {'generation': 2, 'progress': [
        {'local_rank': 1, 'step': 1, 'age_ms': 0}, {'local_rank': 1, 'step': 2, 'age_ms': 0}]})
    out['status'] = frame('STATUS', {})
    out['status-members'] = frame('STATUS', {'verbose': True})
    out['store'] = frame('STORE', {})
    out['auth'] = frame('AUTH', {'nonce': '00' * 32, 'mac': 'ab' * 32})
    out['auth-ok'] = frame('AUTH_OK', {'mac': 'cd' * 32})
    out['hello-auth'] = frame('HELLO', with_(HELLO, peer='rdzvd 0.1.0', auth='hmac-sha256',
                                             nonce='0f' * 32))
    out['hello-auth-short-nonce'] = frame('HELLO', with_(HELLO, auth='hmac-sha256', nonce='0f'))
    out['auth-bad-hex'] = frame('AUTH', {'nonce': 'zz' * 32, 'mac': 'ab' * 32})
    out['status-reply'] = frame('STATUS_REPLY', {'daemon': 'rdzvd', 'jobs': []})
    out['status-reply-full'] = frame('STATUS_REPLY', STATUS_REPLY)
    out['status-reply-no-jobs'] = frame('STATUS_REPLY', with_(STATUS_REPLY, jobs=[]))
    out['status-reply-ranks'] = frame('STATUS_REPLY', with_(STATUS_REPLY, jobs=[with_(
        STATUS_JOB, ranks=[{'rank': 0, 'node_rank': 0, 'host': 'nodeA', 'step': 7, 'age_s': 0.5},
                           {'rank': 1, 'node_rank': 0, 'host': 'nodeA', 'step': 6, 'age_s': 61.0}],
        ranks_left_out=3)]))

    # Conversations: what an agent sends, what the daemon answers.
    out['agent-session'] = (frame('HELLO', HELLO) + frame('JOIN', JOIN) +
                            frame('HEARTBEAT', {'generation': 0}) +
                            frame('NCCL_ID', {'generation': 1, 'ids': [NCCL_HEX]}) +
                            frame('WORKER_EXIT', WORKER_EXIT) + frame('READY', {'generation': 1}) +
                            frame('LEAVE', {'generation': 2, 'status': 'succeeded'}))
    out['daemon-session'] = (frame('HELLO', with_(HELLO, peer='rdzvd 0.1.0')) +
                             frame('JOINED', {'run_id': 'job1', 'waiting': 1}) +
                             frame('NCCL_REQUEST', {'generation': 1, 'count': 1}) +
                             frame('ROUND', ROUND) + frame('HEARTBEAT', {'generation': 1}) +
                             frame('EVENT', {'type': 'restart', 'generation': 1}) +
                             frame('ROUND', with_(ROUND, generation=2, restart_count=1)) +
                             frame('EVENT', EVENT))

    # Malformed: framing.
    out['bad-op'] = frame(0xA1, HELLO)
    out['bad-version'] = frame('HELLO', HELLO, version=2)
    out['bad-reserved'] = frame('JOIN', JOIN, reserved=1)
    out['too-large'] = frame('JOIN', b'{}', length=(1 << 20) + 1)
    out['truncated-header'] = frame('HELLO', HELLO)[:5]
    out['truncated-body'] = frame('ROUND', ROUND)[:40]
    out['empty-body'] = frame('READY', b'')
    # Malformed: bodies.
    out['hello-bad-magic'] = frame('HELLO', with_(HELLO, magic='torch'))
    out['hello-version-2'] = frame('HELLO', with_(HELLO, version=2))
    out['not-json'] = frame('JOIN', b'{"run_id":"job1",')
    out['not-object'] = frame('LEAVE', b'[1,2,3]')
    out['duplicate-key'] = frame('READY', b'{"generation":1,"generation":2}')
    out['nul-in-string'] = frame('JOIN', json.dumps(with_(JOIN, host='a\u0000b')).encode())
    out['join-missing-run-id'] = frame('JOIN', with_(JOIN, run_id=None))
    out['join-wrong-type'] = frame('JOIN', with_(JOIN, nproc='4'))
    out['join-min-over-max'] = frame('JOIN', with_(JOIN, min=5, max=4))
    out['join-bad-nccl'] = frame('JOIN', with_(JOIN, nccl='maybe'))
    out['join-long-host'] = frame('JOIN', with_(JOIN, host='h' * 256))
    out['join-long-run-id'] = frame('JOIN', with_(JOIN, run_id='r' * 129))
    out['join-resume-bad'] = frame('JOIN', with_(JOIN, resume=with_(RESUME, node_rank=2)))
    out['join-resume-port'] = frame('JOIN', with_(JOIN, resume=with_(RESUME, master_port=65536)))
    out['join-resume-missing'] = frame('JOIN', with_(JOIN, resume=with_(RESUME, world_size=None)))
    out['join-resume-not-object'] = frame('JOIN', with_(JOIN, resume=[1]))
    out['join-big-ints'] = frame('JOIN', with_(JOIN, last_call_ms=9223372036854775807,
                                               max_restarts=-9223372036854775808))
    # JOIN gpu_uuids (1.8): a node's GPUs, and what is refused in them.
    gpu = 'GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab'
    out['join-gpu-uuids'] = frame('JOIN', with_(JOIN, gpu_uuids=[gpu, gpu.upper()[:-1] + 'C']))
    out['join-gpu-uuids-twice'] = frame('JOIN', with_(JOIN, gpu_uuids=[gpu, gpu]))
    out['join-gpu-uuids-short'] = frame('JOIN', with_(JOIN, gpu_uuids=[gpu[:-1]]))
    out['join-gpu-uuids-mig'] = frame('JOIN', with_(JOIN, gpu_uuids=['MIG' + gpu[3:]]))
    out['join-gpu-uuids-too-many'] = frame('JOIN', with_(JOIN, gpu_uuids=[
        'GPU-00000000-0000-0000-0000-%012x' % i for i in range(65)]))
    out['join-gpu-uuids-not-array'] = frame('JOIN', with_(JOIN, gpu_uuids=gpu))
    out['round-bad-id'] = frame('ROUND', with_(ROUND, nccl_ids=[NCCL_HEX[:-1] + 'G']))
    out['round-short-id'] = frame('ROUND', with_(ROUND, nccl_ids=['abc']))
    out['round-too-many-ids'] = frame('ROUND', with_(ROUND, nccl_ids=[NCCL_HEX] * 65))
    out['round-rank-out-of-range'] = frame('ROUND', with_(ROUND, node_rank=2))
    out['round-port-0'] = frame('ROUND', with_(ROUND, master_port=0))
    out['round-ids-not-array'] = frame('ROUND', with_(ROUND, nccl_ids={'a': 1}))
    out['worker-exit-huge-time'] = frame('WORKER_EXIT', with_(WORKER_EXIT, time=1e300))
    out['worker-exit-int-time'] = frame('WORKER_EXIT', with_(WORKER_EXIT, time=17))
    out['worker-exit-long-host'] = frame('WORKER_EXIT', with_(WORKER_EXIT, host='h' * 300))
    out['event-long-type'] = frame('EVENT', with_(EVENT, type='x' * 16))
    out['event-long-summary'] = frame('EVENT', with_(EVENT, summary='s' * 1100))
    out['event-utf8-summary'] = frame('EVENT', with_(EVENT, summary='r\u00e9sum\u00e9 \u2713'))
    # Not here: a non-ASCII summary over 1023 bytes ('\u00e9' * 600) is cut inside a character
    # by rdzv_msg_parse_event and can't be sent again; its reproducer is kept in
    # tests/fuzz/crashes/fuzz-rendezvous/ until proto/ is fixed.
    out['nccl-id-bad'] = frame('NCCL_ID', {'generation': 1, 'ids': 'abc'})
    out['leave-no-status'] = frame('LEAVE', {'generation': 1})
    out['ready-float'] = frame('READY', {'generation': 1.5})
    out['deep-nesting'] = frame('HEARTBEAT', b'{"generation":1,"x":' + b'[' * 2000 + b']' * 2000
                                + b'}')
    out['good-then-bad'] = frame('HELLO', HELLO) + frame(0x00, b'')
    out['joined-spare-int'] = frame('JOINED', {'spare': 1})
    out['joined-long-run-id'] = frame('JOINED', {'run_id': 'r' * 129, 'spare': True})
    out['nccl-request-count-0'] = frame('NCCL_REQUEST', {'generation': 1, 'count': 0})
    out['nccl-request-count-65'] = frame('NCCL_REQUEST', {'generation': 1, 'count': 65})
    out['nccl-request-no-count'] = frame('NCCL_REQUEST', {'generation': 1})
    out['nccl-id-empty'] = frame('NCCL_ID', {'generation': 1, 'ids': []})
    out['nccl-id-too-many'] = frame('NCCL_ID', {'generation': 1, 'ids': [NCCL_HEX] * 65})
    out['nccl-id-upper'] = frame('NCCL_ID', {'generation': 1, 'ids': [NCCL_HEX.upper()]})
    out['nccl-id-none'] = frame('NCCL_ID', {'generation': 1})
    out['nccl-id-error-and-bad-ids'] = frame('NCCL_ID', {'generation': 1, 'error': 'x',
                                                         'ids': 'abc'})
    out['nccl-id-long-error'] = frame('NCCL_ID', {'generation': 1, 'error': '\u00e9' * 600})
    out['heartbeat-no-gen'] = frame('HEARTBEAT', {})
    out['heartbeat-string-gen'] = frame('HEARTBEAT', {'generation': '1'})
    out['leave-status-int'] = frame('LEAVE', {'generation': 1, 'status': 0})
    out['error-not-string'] = frame('ERROR', {'error': ['x']})
    out['error-long'] = frame('ERROR', {'error': 'e' * 600})
    out['error-utf8-long'] = frame('ERROR', {'error': '\u2713' * 300})
    out['status-not-object'] = frame('STATUS', b'[]')
    out['status-empty-body'] = frame('STATUS', b'')
    # Hosted replicas (1.5): the leader's request, an agent's two answers, the endpoints.
    out['replica-request'] = frame('REPLICA', {'id': 4, 'port': 29400, 'replicas': 3})
    out['replica-up'] = frame('REPLICA', {'id': 4, 'endpoint': '10.0.0.4:29400'})
    out['replica-v6'] = frame('REPLICA', {'id': 2, 'endpoint': '[fd00::2]:29400'})
    out['replica-failed'] = frame('REPLICA', {'id': 4, 'error': 'cannot start rdzvd'})
    out['replica-no-replicas'] = frame('REPLICA', {'id': 4, 'port': 29400})
    out['replica-port-65535'] = frame('REPLICA', {'id': 4, 'port': 65535, 'replicas': 3})
    out['replica-empty'] = frame('REPLICA', {'id': 4})
    out['replica-bad-endpoint'] = frame('REPLICA', {'id': 4, 'endpoint': 'a,b:1'})
    out['replicas'] = frame('REPLICAS', {'endpoints': ['10.0.0.1:29400', 'h2:29400',
                                                       '[fd00::3]:29400']})
    out['replicas-empty'] = frame('REPLICAS', {'endpoints': []})
    out['replicas-too-many'] = frame('REPLICAS', {'endpoints': ['h:1'] * 8})
    out['replicas-no-port'] = frame('REPLICAS', {'endpoints': ['h']})
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else 'corpus/fuzz-rendezvous'
    os.makedirs(outdir, exist_ok=True)
    s = seeds()
    for name, data in s.items():
        with open(os.path.join(outdir, 'seed-%s' % name), 'wb') as f:
            f.write(data)
    print('%d seeds written to %s' % (len(s), outdir))


if __name__ == '__main__':
    main()
