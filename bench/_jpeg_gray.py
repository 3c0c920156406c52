"""A baseline JPEG encoder for grayscale images in numpy, for bench/make_jpeg_folder.py on machines
without PIL; not a script.

encode(pixels, quality) returns the bytes of a JFIF file as libjpeg writes a one-component image
(PIL's Image.fromarray(pixels, "L").save(f, quality=quality)): the standard luminance quantization
table (ITU T.81 Annex K.1) scaled as libjpeg scales it for `quality`, the standard luminance
Huffman tables (K.3), 8x8 blocks in raster order (edges padded by repeating the last row and
column), a float DCT. Any JPEG decoder reads it; its pixels are within the quantization's error
of the input, not byte-equal to libjpeg's output.
"""
import struct

import numpy as np

# ITU T.81 Annex K.1: the luminance quantization table, rows of the 8x8 block.
_LUMA_Q = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99], np.int64)
# Annex K.3: the luminance DC and AC Huffman tables, as (code counts by length 1..16, symbols).
_DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
_DC_VALS = list(range(12))
_AC_BITS = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D]
_AC_VALS = [
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
    0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xA1, 0x08, 0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52, 0xD1, 0xF0,
    0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
    0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5,
    0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2,
    0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
    0xF9, 0xFA]

# The zigzag order: the row-major index of the k-th coefficient (anti-diagonals, alternating).
_ZIGZAG = np.array([i * 8 + j for s in range(15)
                    for i, j in sorted(((i, s - i) for i in range(8) if 0 <= s - i < 8),
                                       key=lambda ij: -ij[0] if s % 2 == 0 else ij[0])])
# The orthonormal 8-point DCT-II matrix: T.81's FDCT is D @ block @ D.T.
_DCT = np.array([[(np.sqrt(1 / 8) if u == 0 else np.sqrt(2 / 8)) * np.cos((2 * x + 1) * u * np.pi / 16)
                  for x in range(8)] for u in range(8)])


def _codes(bits, vals):
    """symbol -> (code, length) of the canonical Huffman code (T.81 Annex C)."""
    table, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            table[vals[k]] = (code, length)
            code, k = code + 1, k + 1
        code <<= 1
    return table


_DC_CODES, _AC_CODES = _codes(_DC_BITS, _DC_VALS), _codes(_AC_BITS, _AC_VALS)


def quant_table(quality):
    """libjpeg's jpeg_quality_scaling of the luminance table, row-major, each in 1..255."""
    quality = min(max(int(quality), 1), 100)
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.clip((_LUMA_Q * scale + 50) // 100, 1, 255)


def _magnitude(v):
    """(T.81's size category of v, its bits: v, or v - 1 in ones' complement when negative)."""
    size = int(abs(v)).bit_length()
    return size, (v if v >= 0 else v + (1 << size) - 1)


def _segment(marker, payload):
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def encode(pixels, quality=90):
    """The JFIF bytes of `pixels`, an (H, W) uint8 array."""
    pixels = np.asarray(pixels, np.uint8)
    h, w = pixels.shape
    q = quant_table(quality)
    padded = np.pad(pixels.astype(np.float64) - 128, ((0, -h % 8), (0, -w % 8)), mode="edge")
    bh, bw = padded.shape[0] // 8, padded.shape[1] // 8
    blocks = padded.reshape(bh, 8, bw, 8).transpose(0, 2, 1, 3).reshape(-1, 8, 8)
    coeffs = np.einsum("ux,bxy,vy->buv", _DCT, blocks, _DCT).reshape(-1, 64)
    quantized = np.round(coeffs / q).astype(np.int64)[:, _ZIGZAG]
    acc, nbits, out = 0, 0, bytearray()

    def put(code, length):
        nonlocal acc, nbits
        acc, nbits = (acc << length) | code, nbits + length
        while nbits >= 8:
            nbits -= 8
            byte = (acc >> nbits) & 0xFF
            out.append(byte)
            if byte == 0xFF:
                out.append(0)  # byte stuffing
        acc &= (1 << nbits) - 1

    previous_dc = 0
    for block in quantized:
        size, value = _magnitude(int(block[0]) - previous_dc)
        previous_dc = int(block[0])
        put(*_DC_CODES[size])
        if size:
            put(value, size)
        run = 0
        last = int(np.max(np.nonzero(block)[0])) if np.any(block[1:]) else 0
        for k in range(1, last + 1):
            v = int(block[k])
            if v == 0:
                run += 1
                continue
            while run > 15:
                put(*_AC_CODES[0xF0])  # ZRL: 16 zeros
                run -= 16
            size, value = _magnitude(v)
            put(*_AC_CODES[(run << 4) | size])
            put(value, size)
            run = 0
        if last < 63:
            put(*_AC_CODES[0x00])  # EOB
    if nbits:
        put((1 << (8 - nbits)) - 1, 8 - nbits)  # pad with ones
    header = b"\xFF\xD8" + _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    header += _segment(0xDB, bytes([0]) + bytes(int(v) for v in q[_ZIGZAG]))
    header += _segment(0xC0, struct.pack(">BHHB", 8, h, w, 1) + bytes([1, 0x11, 0]))
    header += _segment(0xC4, bytes([0x00] + _DC_BITS + _DC_VALS))
    header += _segment(0xC4, bytes([0x10] + _AC_BITS + _AC_VALS))
    header += _segment(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    return header + bytes(out) + b"\xFF\xD9"
