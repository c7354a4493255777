"""Screens shipped as tiles: exact pixels on the receiving side, only the tiles that changed (and
that the receiver was never sent) carried, each named by the hash of its pixels, and a receiver
lacking a base or a tile says so."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from vlrl.bench.tiles_bench import desktop_screens
from vlrl.mm import content_hash
from vlrl.mm.tile_wire import TileReceiver, TileSender, tile_grid
from vlrl.mm.tiles import TileCodec


def _ship(sender: TileSender, receiver: TileReceiver, pixels: np.ndarray):
    """One image across a real serialisation; the message and what the receiver made of it."""
    message = pickle.loads(pickle.dumps(sender.encode(content_hash(pixels), pixels), protocol=5))
    return message, receiver.assemble(message)


def _changed_tiles(before: np.ndarray, after: np.ndarray, tile: int = 64) -> list[int]:
    """Row-major positions of the tiles whose pixels differ, computed directly from the pixels."""
    cols = -(-before.shape[1] // tile)
    differs = np.any(before != after, axis=2)
    return sorted({(r // tile) * cols + c // tile for r, c in zip(*np.nonzero(differs))})


@pytest.mark.parametrize("size", [(640, 480), (330, 250)])  # rows of 8-byte words; of 2-byte ones
def test_a_typing_trajectory_arrives_exact_and_each_turn_carries_only_the_changed_tiles(size):
    shots = desktop_screens(*size, 10)  # 10 x 8 tiles of 64 px (6 x 4), with cut edge tiles
    sender, receiver = TileSender(), TileReceiver(64 * 2**20)
    for turn, shot in enumerate(shots):
        message, pixels = _ship(sender, receiver, shot)
        assert pixels is not None and pixels.tobytes() == shot.tobytes()
        assert not pixels.flags.writeable  # the next screen's base: nobody may draw into it
        assert np.array_equal(message.hashes, tile_grid(TileCodec(), shot)[message.changed])
        if turn == 0:
            assert message.base is None and len(message.carried) == len(set(map(bytes, message.hashes)))
            continue
        assert message.base == content_hash(shots[turn - 1])
        assert message.changed.tolist() == _changed_tiles(shots[turn - 1], shot)
        assert message.nbytes < shot.nbytes / 100


@pytest.mark.parametrize("width", [320, 330, 331])  # rows compared in 8-, 2- and 1-byte words
def test_a_tile_with_one_changed_byte_anywhere_is_found_changed(width):
    before = np.random.default_rng(0).integers(0, 256, (130, width, 3), dtype=np.uint8)
    corners = [(0, 0, 0), (63, 63, 2), (64, 64, 0), (127, 191, 1), (128, 192, 1), (129, width - 1, 2)]
    for y, x, channel in corners:
        after = before.copy()
        after[y, x, channel] ^= 1
        assert TileCodec().changed(before, after).tolist() == _changed_tiles(before, after), (y, x, channel)
    after = before.copy()
    after[[5, 70, 129], [300, 10, width - 1]] = 0
    assert TileCodec().changed(before, after).tolist() == _changed_tiles(before, after)


def test_a_screen_drawn_over_the_last_one_in_place_still_arrives_exact():
    shots = desktop_screens(320, 240, 4)
    sender, receiver = TileSender(), TileReceiver(64 * 2**20)
    screen = np.empty_like(shots[0])  # a harness that draws every screen into one buffer
    for shot in shots:
        screen[...] = shot
        message, pixels = _ship(sender, receiver, screen)
        assert pixels.tobytes() == shot.tobytes()
    assert len(message.changed) > 0


def test_a_screen_seen_before_costs_its_changed_positions_but_no_pixels():
    shots = desktop_screens(320, 240, 3)
    sender, receiver = TileSender(), TileReceiver(64 * 2**20)
    for shot in shots:
        _ship(sender, receiver, shot)
    message, pixels = _ship(sender, receiver, shots[0])  # back to the first screen
    assert len(message.changed) > 0 and len(message.carried) == 0 and message.data.size == 0
    assert pixels.tobytes() == shots[0].tobytes()


def test_a_receiver_without_the_base_or_a_tile_misses_until_the_sender_starts_over():
    shots = desktop_screens(320, 240, 4)
    sender, receiver = TileSender(), TileReceiver(64 * 2**20)
    _ship(sender, receiver, shots[0])
    _, pixels = _ship(sender, TileReceiver(64 * 2**20), shots[1])  # a receiver that never saw the base
    assert pixels is None
    sender.reset()
    _, pixels = _ship(sender, TileReceiver(64 * 2**20), shots[1])
    assert pixels.tobytes() == shots[1].tobytes()

    tiny = TileReceiver(max_bytes=2 * 64 * 64 * 3)  # holds two tiles (and no screen): the base's others are dropped
    sender = TileSender()
    _, first = _ship(sender, tiny, shots[2])
    assert first.tobytes() == shots[2].tobytes()  # an image always assembles from what it carries
    assert _ship(sender, tiny, shots[3])[1] is None


def test_each_size_has_its_own_base():
    small, large = desktop_screens(320, 240, 2), desktop_screens(640, 480, 2)
    sender, receiver = TileSender(), TileReceiver(64 * 2**20)
    for shot in (small[0], large[0], small[1], large[1]):
        message, pixels = _ship(sender, receiver, shot)
        assert pixels.tobytes() == shot.tobytes()
    assert message.base == content_hash(large[0])
