"""Shared-memory connections between real processes: order, credits, timeouts, nothing left behind."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from nicksim.calls import Call
from nicksim.realhw.shm import NCCL_STEPS, ShmRing, ShmTimeoutError, segment_name

STEP = 4096
GUARD_S = 60


def steps(seed: int, n: int):
    """The test's traffic: n steps of 0 to STEP bytes, their contents from `seed`."""
    rng = np.random.default_rng(seed)
    for size in rng.integers(0, STEP + 1, n):
        yield rng.integers(0, 256, size, dtype=np.uint8)


def digest(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part.tobytes())
    return h.hexdigest()


# The receiving process: make the ring, take `n` steps (dropping the name once the first one shows the
# sender is attached), print their digest; the sending process: attach, post the steps.
RECEIVER = r"""
import hashlib, sys
from nicksim.realhw.shm import ShmRing
name, step, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ring = ShmRing.create(name, step, "channel 0, rank 1 -> rank 0")
print("ready", flush=True)
h = hashlib.sha256()
for i in range(n):
    data = ring.recv(20)
    h.update(len(data).to_bytes(8, "little") + data.tobytes())
    del data
    ring.release()
    ring.unlink()
print(h.hexdigest(), flush=True)
ring.close()
"""
SENDER = r"""
import sys, time
import numpy as np
from nicksim.realhw.shm import ShmRing
sys.path.insert(0, sys.argv[5])
from test_shm import steps
name, step, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ring = ShmRing.attach(name, step, "channel 0, rank 1 -> rank 0", 20)
for part in steps(seed, n):
    ring.send(part, 20)
print("sent", flush=True)
if len(sys.argv) > 6:
    time.sleep(120)
ring.close()
"""


def start(program: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", program, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def unique(tag: str) -> str:
    return segment_name(f"test{os.getpid()}{tag}", 0, 1, 0)


def test_steps_arrive_in_order_through_eight_slots_between_processes():
    name, n = unique("order"), 600
    receiver = start(RECEIVER, name, STEP, n)
    assert receiver.stdout.readline().strip() == "ready"
    sender = start(SENDER, name, STEP, n, 7, os.path.dirname(__file__))
    out_r, _ = receiver.communicate(timeout=GUARD_S)
    out_s, _ = sender.communicate(timeout=GUARD_S)
    assert (receiver.returncode, sender.returncode) == (0, 0), (out_r, out_s)
    assert out_r.split() == [digest(steps(7, n))]
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_full_ring_holds_the_sender_until_a_slot_is_released():
    name = unique("full")
    recv = ShmRing.create(name, 64, "channel 2, rank 3 -> rank 4")
    send = ShmRing.attach(name, 64, "channel 2, rank 3 -> rank 4", 1)
    recv.unlink()
    for i in range(NCCL_STEPS):
        send.send(np.full(8, i, np.uint8), 1)
    with pytest.raises(ShmTimeoutError, match=r"channel 2, rank 3 -> rank 4: no free slot: the receiver took "
                                              r"nothing for 0.2 s \(step 8\)"):
        send.send(np.zeros(8, np.uint8), 0.2)
    assert recv.recv(1).tolist() == [0] * 8
    recv.release()
    send.send(np.full(3, 9, np.uint8), 0.2)  # the released slot takes the ninth step
    for i in range(1, NCCL_STEPS):
        assert recv.recv(1).tolist() == [i] * 8
        recv.release()
    assert recv.recv(1).tolist() == [9, 9, 9]
    recv.release()
    send.close()
    recv.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_silent_sender_is_a_timeout_naming_the_connection():
    ring = ShmRing.create(unique("silent"), 64, "channel 0, rank 1 -> rank 0")
    with pytest.raises(ShmTimeoutError, match=r"shm: channel 0, rank 1 -> rank 0: nothing arrived from the sender "
                                              r"for 0.2 s \(step 0\)"):
        ring.recv(0.2)
    ring.close()


def test_a_receiver_that_never_made_its_segment_is_named():
    with pytest.raises(ShmTimeoutError, match="segment nicksim-.* did not appear within 0.2 s"):
        ShmRing.attach(unique("absent"), 64, "channel 0, rank 0 -> rank 1", 0.2)


def test_a_killed_sender_leaves_a_timeout_and_no_segment():
    name = unique("killed")
    recv = ShmRing.create(name, STEP, "channel 0, rank 1 -> rank 0")
    sender = start(SENDER, name, STEP, 3, 1, os.path.dirname(__file__), "stall")
    assert sender.stdout.readline().strip() == "sent"
    recv.unlink()  # both sides have it mapped: the name can go
    for _ in range(3):
        recv.recv(5)
        recv.release()
    sender.send_signal(signal.SIGKILL)
    sender.wait(timeout=GUARD_S)
    with pytest.raises(ShmTimeoutError, match="nothing arrived from the sender for 0.3 s"):
        recv.recv(0.3)
    recv.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_batches_of_steps_stop_at_the_last_slot_and_keep_each_steps_length():
    name = unique("batch")
    recv = ShmRing.create(name, 4, "channel 0, rank 0 -> rank 1")
    send = ShmRing.attach(name, 4, "channel 0, rank 0 -> rank 1", 1)
    recv.unlink()
    assert (send.free_steps(), recv.ready_steps()) == (NCCL_STEPS, 0)
    send.send(np.arange(4 * (NCCL_STEPS - 2), dtype=np.uint8), 1, steps=NCCL_STEPS - 2)
    assert recv.ready_steps() == NCCL_STEPS - 2 and send.free_steps() == 2
    assert recv.recv(1, steps=NCCL_STEPS - 2).tolist() == list(range(4 * (NCCL_STEPS - 2)))
    recv.release(NCCL_STEPS - 2)
    # Slots 6 and 7 are the only ones before the wrap, though all eight are free.
    assert send.free_steps() == 2
    send.send(np.array([1, 2, 3, 4, 5, 6], np.uint8), 1, steps=2)  # a full step, then one of 2 bytes
    assert recv.ready_steps() == 2
    assert recv.recv(1, steps=2).tolist() == [1, 2, 3, 4, 5, 6]
    recv.release(2)
    assert send.free_steps() == NCCL_STEPS
    with pytest.raises(ValueError):
        send.reserve(9, steps=2)
    send.close()
    recv.close()


@pytest.mark.parametrize("protocol, line, data_per_line", [("LL", 16, 8), ("LL128", 128, 120)])
def test_line_protocols_flag_every_line_and_carry_their_share_of_a_slot(protocol, line, data_per_line):
    name = unique(protocol)
    step_nbytes = 40 * line
    recv = ShmRing.create(name, step_nbytes, "channel 0, rank 0 -> rank 1", protocol)
    send = ShmRing.attach(name, step_nbytes, "channel 0, rank 0 -> rank 1", 1, protocol)
    recv.unlink()
    assert recv.data_nbytes == send.data_nbytes == 40 * data_per_line
    rng = np.random.default_rng(0)
    for step in range(2 * NCCL_STEPS + 3):  # every slot, reused: the flag tells the uses apart
        payload = rng.integers(0, 256, size=1 + step * 37 % send.data_nbytes, dtype=np.uint8)
        assert not recv.can_recv() and recv.ready_steps() == 0
        send.send(payload, 1)
        assert recv.ready_steps() == 1
        slot = (step % NCCL_STEPS) * step_nbytes
        lines = np.frombuffer(recv._buf, np.uint8, step_nbytes, 3 * 128 + slot)[:-(-payload.size // data_per_line) * line]
        flags = lines.view(np.uint32 if protocol == "LL" else np.uint64).reshape(-1, line // (4 if protocol == "LL" else 8))
        assert np.all(flags[:, 1::2] == step + 1) if protocol == "LL" else np.all(flags[:, 15] == step + 1)
        assert recv.recv(1, nbytes=payload.size).tolist() == payload.tolist()
        recv.release()
    # Two steps in one pass, the second short; a receiver that expects more waits, then times out.
    both = rng.integers(0, 256, size=send.data_nbytes + 5, dtype=np.uint8)
    send.send(both, 1, steps=2)
    assert recv.recv(1, steps=2, nbytes=both.size).tolist() == both.tolist()
    recv.release(2)
    send.send(np.ones(data_per_line, np.uint8), 1)
    with pytest.raises(ShmTimeoutError, match="nothing arrived from the sender"):
        recv.recv(0.2, nbytes=3 * data_per_line)
    send.close()
    recv.close()


# --- memory in place before the first call -------------------------------------------------------

def _resident_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def test_both_sides_map_a_segment_with_its_pages_in_place(tmp_path):
    # MAP_POPULATE: the slots are resident at mapping, as a GPU's buffers are, so the first calls
    # do not fault them in page by page (an untouched mapping adds nothing to RssShmem).
    from nicksim.realhw.shm import attach_segment, create_segment
    name = f"nicksim-test-populate-{os.getpid()}"
    nbytes = 32 << 20
    before = _resident_kib("RssShmem")
    try:
        fd, buf = create_segment(name, nbytes)
        fd2, buf2 = attach_segment(name, nbytes, "test", 1)
        assert _resident_kib("RssShmem") - before >= 0.9 * 2 * nbytes / 1024  # both mappings resident
        buf.close(), buf2.close(), os.close(fd), os.close(fd2)
    finally:
        os.unlink(f"/dev/shm/{name}")


def test_a_runs_receive_buffer_is_written_before_the_first_call():
    from nicksim.realhw.runner import _buffers
    call = Call("all_reduce", 16 << 20, "float", "sum", -1, 2)
    before = _resident_kib("RssAnon")
    send, recv = _buffers(call, 0, False)
    assert _resident_kib("RssAnon") - before >= 0.9 * recv.nbytes / 1024 and not recv.any()
