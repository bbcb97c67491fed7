"""NET/Socket connections inside one process, over loopback: what a NetLink promises its executor."""
import socket
import threading
import time

import numpy as np
import pytest

from nicksim.realhw import net
from nicksim.realhw.net import NetError, NetLink, NetListener, SocketConfig, fifo_name
from nicksim.realhw.shm import NCCL_STEPS

STEP = 4096
KEY = (0, 0, 1, 0)


@pytest.fixture
def pair(request):
    """A connected (sending, receiving) NetLink over 127.0.0.1 with the control socket alone."""
    tag = f"t{id(request)}"
    listener = NetListener("127.0.0.1", 5)
    config = SocketConfig(0, 0)
    sender = NetLink.connect(fifo_name(tag, KEY, "send"), STEP, "Simple", "sender", listener.address, tag, KEY,
                             config, 5)
    socks = listener.accept_links(tag, {KEY}, 0, time.monotonic() + 5)[KEY]
    receiver = NetLink(fifo_name(tag, KEY, "recv"), STEP, "Simple", "receiver", "recv", socks, config, 5)
    listener.close()
    yield sender, receiver
    sender.close()
    receiver.close()


def _post(link: NetLink, value: int, nbytes: int = STEP) -> None:
    while not link.free_steps():
        time.sleep(1e-3)
    link.reserve(nbytes)[:] = value
    link.post(nbytes)


def _wait_ready(link: NetLink, steps: int) -> None:
    deadline = time.monotonic() + 5
    while link.ready_steps() < steps:
        assert time.monotonic() < deadline, "the steps never arrived"
        time.sleep(1e-3)


def test_every_step_posted_arrives_whole_and_in_order(pair):
    sender, receiver = pair
    for i in range(3 * NCCL_STEPS):
        _post(sender, i, STEP if i % 5 else STEP // 3)
        if i % NCCL_STEPS == NCCL_STEPS - 1:
            for j in range(i - NCCL_STEPS + 1, i + 1):
                _wait_ready(receiver, 1)
                got = receiver.recv(5)
                assert got.size == (STEP if j % 5 else STEP // 3) and (got == j % 256).all()
                receiver.release()


def test_the_proxy_wakes_an_executor_that_watches_it(pair):
    sender, receiver = pair
    woke = threading.Event()
    receiver.watch(woke)
    assert not woke.wait(0.05)  # nothing moved: the executor may sleep
    _post(sender, 7)
    assert woke.wait(5)
    assert receiver.ready_steps() == 1


def test_a_sender_that_finished_and_closed_first_leaves_its_steps_to_be_read(pair):
    sender, receiver = pair
    for i in range(3):
        _post(sender, i)
    sender.close()  # drains: every posted step is on the wire before the sockets close
    woke = threading.Event()
    receiver.watch(woke)
    deadline = time.monotonic() + 5
    while receiver._gone is None and receiver._error is None:  # the proxy read to the end of the stream
        assert time.monotonic() < deadline
        time.sleep(1e-3)
    for i in range(3):
        assert (receiver.recv(5) == i).all()
        receiver.release()
    with pytest.raises(NetError, match="receiver: the peer's socket closed its end"):
        receiver.ready_steps()


def test_a_sender_that_closes_in_the_middle_of_a_step_is_an_error_at_once(pair):
    sender, receiver = pair
    # the length of a full step and half its bytes, then the end of the stream
    sender._ctrl.sendall(net._SIZE.pack(STEP) + bytes(STEP // 2))
    sender._ctrl.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + 5
    while receiver._error is None:
        assert time.monotonic() < deadline
        time.sleep(1e-3)
    with pytest.raises(NetError, match="closed its end"):
        receiver.ready_steps()


def test_many_buffers_go_out_in_order_over_several_sendmsg_calls():
    a, b = socket.socketpair()
    rng = np.random.default_rng(5)
    buffers = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 300, 3 * net._IOV_MAX)]
    want = b"".join(buffers)
    got = bytearray()

    def read():
        while len(got) < len(want):
            got.extend(b.recv(1 << 16))

    reader = threading.Thread(target=read)
    reader.start()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # partial sends: the kernel takes a little at a time
    net._sendmsg_all(a, [memoryview(x) for x in buffers])
    reader.join(10)
    a.close()
    b.close()
    assert bytes(got) == want
