"""One direction of a connection between two ranks on one host, through POSIX shared memory.

A segment holds NCCL_STEPS slots of `step_nbytes` and two counters, as NCCL's Simple protocol lays
out a connection's FIFO: `tail`, the steps the sender has posted, and `head`, the steps the
receiver has consumed, each in its own 128-byte line ahead of the slots. The sender waits for a
free slot (tail - head < NCCL_STEPS), fills it, records its length and advances tail; the receiver
waits for tail > head, reads the slot and advances head, which returns the slot's credit.

The receiver creates the segment, the sender attaches to it, and the creator unlinks the name as
soon as both have it mapped (`unlink`), so nothing is left under /dev/shm however the processes
end. A wait longer than `timeout_s` raises ShmTimeoutError naming the connection and what it was
waiting for: a peer that died or hangs is reported, never waited on forever.
"""
from __future__ import annotations

import mmap
import os
import time

import numpy as np

from ..errors import NickSimError

__all__ = ["NCCL_STEPS", "ShmRing", "ShmTimeoutError", "segment_name"]

NCCL_STEPS = 8
_LINE = 128  # the counters each get a cache line's worth of room (NCCL keeps head and tail apart)
_HEAD, _TAIL, _SIZES = 0, _LINE, 2 * _LINE  # byte offsets: head, tail, then one uint64 length per slot
_SLOTS = _SIZES + _LINE
_SPIN_S = (0.0, 1e-5, 1e-4, 5e-4)  # back-off between polls: first spin, then sleep a little longer


class ShmTimeoutError(NickSimError):
    """A shared-memory connection's peer did not move within the timeout."""

    kind = "timeout"


def segment_name(job: str, channel: int, src: int, dst: int, conn: int = 0) -> str:
    """The segment's name under /dev/shm: the job's tag and the connection it carries."""
    return f"nicksim-{job}-c{channel}-{src}to{dst}-{conn}"


class ShmRing:
    """One connection's FIFO of NCCL_STEPS slots in shared memory, seen from one side ("send" or
    "recv"); `label` names it in errors (e.g. 'channel 0, rank 1 -> rank 2')."""

    def __init__(self, name: str, step_nbytes: int, side: str, label: str, fd: int, buf: mmap.mmap, owner: bool):
        self.name, self.step_nbytes, self.side, self.label = name, step_nbytes, side, label
        self._fd, self._buf, self._owner = fd, buf, owner
        self._head = np.frombuffer(buf, np.uint64, 1, _HEAD)
        self._tail = np.frombuffer(buf, np.uint64, 1, _TAIL)
        self._sizes = np.frombuffer(buf, np.uint64, NCCL_STEPS, _SIZES)
        self._data = np.frombuffer(buf, np.uint8, NCCL_STEPS * step_nbytes, _SLOTS)
        self._step = 0  # this side's own count: the next step it posts (send) or takes (recv)
        self._unlinked = not owner

    @staticmethod
    def segment_nbytes(step_nbytes: int) -> int:
        return _SLOTS + NCCL_STEPS * step_nbytes

    @classmethod
    def create(cls, name: str, step_nbytes: int, label: str) -> "ShmRing":
        """The receiving side: make the segment (zeroed: head = tail = 0)."""
        fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, cls.segment_nbytes(step_nbytes))
        return cls(name, step_nbytes, "recv", label, fd, mmap.mmap(fd, cls.segment_nbytes(step_nbytes)), True)

    @classmethod
    def attach(cls, name: str, step_nbytes: int, label: str, timeout_s: float) -> "ShmRing":
        """The sending side: map the segment the receiver made, waiting for it up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
                if os.fstat(fd).st_size == cls.segment_nbytes(step_nbytes):
                    break
                os.close(fd)  # made but not yet sized
            except FileNotFoundError:
                pass
            if time.monotonic() >= deadline:
                raise ShmTimeoutError(f"{label}: the receiver's segment {name} did not appear within "
                                      f"{timeout_s:g} s", "shm")
            time.sleep(1e-3)
        return cls(name, step_nbytes, "send", label, fd, mmap.mmap(fd, cls.segment_nbytes(step_nbytes)), False)

    def unlink(self) -> None:
        """Drop the name once both sides have the segment mapped (the creator's call)."""
        if not self._unlinked:
            try:
                os.unlink(f"/dev/shm/{self.name}")
            except FileNotFoundError:
                pass
            self._unlinked = True

    def close(self) -> None:
        self.unlink()
        for view in ("_head", "_tail", "_sizes", "_data"):
            setattr(self, view, None)
        try:
            self._buf.close()
        except BufferError:
            pass  # a step still viewed by the caller: the mapping goes with the last view
        os.close(self._fd)

    # --- moving steps ---------------------------------------------------------------------

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        polls = 0
        while not ready():
            if time.monotonic() >= deadline:
                raise ShmTimeoutError(f"{self.label}: {what} for {timeout_s:g} s (step {self._step})", "shm")
            time.sleep(_SPIN_S[min(polls // 256, len(_SPIN_S) - 1)])
            polls += 1

    def can_send(self) -> bool:
        """Whether a slot is free for the next step."""
        return self._step - int(self._head[0]) < NCCL_STEPS

    def can_recv(self) -> bool:
        """Whether the next step has been posted."""
        return int(self._tail[0]) > self._step

    def free_steps(self) -> int:
        """How many steps can be posted now, in slots that follow each other in memory (a batch
        never wraps past the last slot)."""
        return min(NCCL_STEPS - (self._step - int(self._head[0])), NCCL_STEPS - self._step % NCCL_STEPS)

    def ready_steps(self) -> int:
        """How many posted steps can be taken now, in slots that follow each other in memory."""
        return min(int(self._tail[0]) - self._step, NCCL_STEPS - self._step % NCCL_STEPS)

    def send(self, data: np.ndarray, timeout_s: float, steps: int = 1) -> None:
        """Post `steps` steps holding `data` (full slots but the last; may be empty)."""
        payload = data.reshape(-1).view(np.uint8)
        self._wait(lambda: self.free_steps() >= steps, "no free slot: the receiver took nothing", timeout_s)
        self.reserve(payload.size, steps)[:] = payload
        self.post(payload.size, steps)

    def reserve(self, nbytes: int, steps: int = 1) -> np.ndarray:
        """The next `steps` slots, `nbytes` of them, to fill in place (once free_steps allows)."""
        if nbytes > steps * self.step_nbytes:
            raise ValueError(f"{nbytes} bytes in {steps} slots of {self.step_nbytes}")
        start = (self._step % NCCL_STEPS) * self.step_nbytes
        return self._data[start:start + nbytes]

    def post(self, nbytes: int, steps: int = 1) -> None:
        """Post the reserved slots, filled with `nbytes` bytes: every slot full but the last."""
        slot = self._step % NCCL_STEPS
        self._sizes[slot:slot + steps - 1] = self.step_nbytes
        self._sizes[slot + steps - 1] = nbytes - (steps - 1) * self.step_nbytes
        self._step += steps
        self._tail[0] = self._step  # x86 keeps stores in order: the data and sizes are seen before the tail

    def recv(self, timeout_s: float, steps: int = 1) -> np.ndarray:
        """The next `steps` steps' bytes (a view into the slots: use it before `release`), every
        step but the last taken as full, as a primitive posts them."""
        self._wait(lambda: self.ready_steps() >= steps, "nothing arrived from the sender", timeout_s)
        slot = self._step % NCCL_STEPS
        start = slot * self.step_nbytes
        return self._data[start:start + (steps - 1) * self.step_nbytes + int(self._sizes[slot + steps - 1])]

    def release(self, steps: int = 1) -> None:
        """Give the steps just read back to the sender."""
        self._step += steps
        self._head[0] = self._step
