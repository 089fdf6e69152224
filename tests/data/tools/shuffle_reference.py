#!/usr/bin/env python3
"""Reference implementation of the shuffle permutation documented in src/data/dataset.hpp, written
independently of the C++ (MT19937-64 per Matsumoto & Nishimura, splitmix64, Lemire bounded draws).

  shuffle_reference.py SEED EPOCH N   prints the permutation of [0, N), space-separated
  shuffle_reference.py selftest       checks MT19937-64 against the C++ standard's 10000th output
"""
import sys

M64 = (1 << 64) - 1


class MT19937_64:
    N, M = 312, 156
    UPPER, LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.index = self.N

    def _twist(self):
        mt = self.mt
        for i in range(self.N):
            x = (mt[i] & self.UPPER) | (mt[(i + 1) % self.N] & self.LOWER)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + self.M) % self.N] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & M64


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def bounded(gen, bound):
    m = gen() * bound
    low = m & M64
    if low < bound:
        threshold = ((1 << 64) - bound) % bound
        while low < threshold:
            m = gen() * bound
            low = m & M64
    return m >> 64


def permutation(seed, epoch, n):
    gen = MT19937_64(splitmix64((splitmix64(seed) + epoch) & M64))
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        k = bounded(gen, i + 1)
        p[i], p[k] = p[k], p[i]
    return p


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "selftest":
        g = MT19937_64(5489)
        for _ in range(9999):
            g()
        ok = g() == 9981545732273789042
        print("ok" if ok else "MT19937-64 mismatch")
        sys.exit(0 if ok else 1)
    seed, epoch, n = (int(a) for a in sys.argv[1:4])
    print(" ".join(str(v) for v in permutation(seed, epoch, n)))
