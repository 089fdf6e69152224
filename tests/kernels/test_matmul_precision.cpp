// The linear layers' GEMMs below fp32 (Kernels::set_matmul_precision, core/matmul_precision.hpp):
// forward and backward equal a double-precision product of operands rounded to TF32 or bfloat16 by
// this file's own rounding (frexp/ldexp arithmetic, not the backends' bit manipulation); the bias and
// its gradient stay exact fp32; the rounding really happens; FP32 again gives the exact GEMMs.
//
// Tolerance. A product of two TF32 or bf16 values is exact in fp32 (at most 2 x 11 significant bits),
// so what remains is fp32 summation: each output is a sum of K products (plus a bias or the value it
// accumulates into), |error| <= (K + 2) 2^-24 S with S = sum |a b| + |other terms|; the tests allow
// twice that. That holds on the Kokkos backend and on gpu-sim (which round to nearest even, as here).
// cuBLASLt on a real GPU does not document how its FAST_16BF / FAST_TF32 down-conversion rounds (ties
// away from zero and truncation are both possible in hardware), so there each operand may differ by one
// unit in the last place of the rounded format: a product by 2 x 2^(1-p) relative (p = 8 or 11
// significant bits), and the bound on a GPU adds 2^(2-p) S.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"

#include "kernel_test_util.hpp"

namespace trident::kt {
namespace {

class MatmulPrecisionTest : public KernelTest {
 protected:
  // The operand format's significant bits (implicit bit included).
  static int significant_bits(MatmulPrecision p) { return p == MatmulPrecision::BF16 ? 8 : 11; }

  // x rounded to `bits` significant bits, to nearest with ties to even (nearbyint in the default
  // rounding mode), computed on the value, not its bit pattern. Denormals are not produced by the
  // data below.
  static double round_to(float x, int bits) {
    if (x == 0.0f) return 0.0;
    int e = 0;
    const double m = std::frexp(double(x), &e);  // x = m 2^e, 0.5 <= |m| < 1
    return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
  }
  static VecD rounded(const VecF& v, int bits) {
    VecD r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = round_to(v[i], bits);
    return r;
  }

  // Bound factor on S (see the file comment) for a sum of K products in this backend.
  double bound_factor(int64_t K, MatmulPrecision p) const {
    double f = 2.0 * double(K + 2) * std::ldexp(1.0, -24);
#if !TRIDENT_GPU_SIM
    if (backend() == "cuda") f += std::ldexp(1.0, 2 - significant_bits(p));
#endif
    (void)p;
    return f;
  }

  // got[i] within factor * S[i] of want[i] everywhere; the reference must not vanish.
  static ::testing::AssertionResult within(const VecF& got, const VecD& want, const VecD& S, double factor) {
    if (max_abs(want) < 1e-3) return ::testing::AssertionFailure() << "degenerate reference";
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = std::fabs(double(got[i]) - want[i]);
      if (!(err <= factor * S[i]))
        return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << " want " << want[i] << " error "
                                             << err << " > bound " << factor * S[i];
    }
    return ::testing::AssertionSuccess();
  }
};

// C[i,j] = sum_k A[i,k] B[j,k] + init[i,j] (row-major; A [I,K], B [J,K]) and S = sum |A B| + |init|.
struct Product {
  VecD value, magnitude;
};
Product product_abt(const VecD& A, const VecD& B, const VecD& init, int64_t I, int64_t J, int64_t K) {
  Product p{VecD(I * J), VecD(I * J)};
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) {
      double s = init[i * J + j], m = std::fabs(init[i * J + j]);
      for (int64_t k = 0; k < K; ++k) {
        s += A[i * K + k] * B[j * K + k];
        m += std::fabs(A[i * K + k] * B[j * K + k]);
      }
      p.value[i * J + j] = s;
      p.magnitude[i * J + j] = m;
    }
  return p;
}
VecD transposed(const VecD& M, int64_t rows, int64_t cols) {
  VecD t(M.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = M[r * cols + c];
  return t;
}

// Shapes off every tile size; values with full fp32 mantissas.
struct Case {
  static constexpr int64_t N = 37, IC = 70, OC = 45;
  VecF x = random_vec(N * IC, 71), w = random_vec(OC * IC, 72), b = random_vec(OC, 73);
  VecF dout = random_vec(N * OC, 74), dx0 = random_vec(N * IC, 75), dw0 = random_vec(OC * IC, 76);
  VecF db0 = random_vec(OC, 77);
};

TEST_P(MatmulPrecisionTest, ForwardAndBackwardMultiplyRoundedOperands) {
  for (MatmulPrecision p : {MatmulPrecision::TF32, MatmulPrecision::BF16}) {
    SCOPED_TRACE(p == MatmulPrecision::BF16 ? "bf16" : "tf32");
    const int bits = significant_bits(p);
    const Case c;
    const int64_t N = c.N, IC = c.IC, OC = c.OC;
    Buf X(*k, c.x), W(*k, c.w), Bb(*k, c.b), out(*k, N * OC), D(*k, c.dout), dX(*k, c.dx0), dW(*k, c.dw0),
        dB(*k, c.db0);
    k->set_matmul_precision(p);
    k->matmul_forward(out.get(), X.get(), W.get(), Bb.get(), N, IC, OC);
    k->matmul_backward(dX.get(), dW.get(), dB.get(), D.get(), X.get(), W.get(), N, IC, OC);

    const VecD xr = rounded(c.x, bits), wr = rounded(c.w, bits), dr = rounded(c.dout, bits);
    VecD bias_rows(N * OC);  // the bias, unrounded, on every row
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) bias_rows[i * OC + o] = c.b[o];
    const Product fwd = product_abt(xr, wr, bias_rows, N, OC, IC);
    EXPECT_TRUE(within(out.host(), fwd.value, fwd.magnitude, bound_factor(IC, p))) << "forward";
    // dinp += dout W: rows of dout against the columns of W.
    const Product dxp = product_abt(dr, transposed(wr, OC, IC), to_double(c.dx0), N, IC, OC);
    EXPECT_TRUE(within(dX.host(), dxp.value, dxp.magnitude, bound_factor(OC, p))) << "dinp";
    // dweight += dout^T inp.
    const Product dwp = product_abt(transposed(dr, N, OC), transposed(xr, N, IC), to_double(c.dw0), OC, IC, N);
    EXPECT_TRUE(within(dW.host(), dwp.value, dwp.magnitude, bound_factor(N, p))) << "dweight";
    // dbias += the column sums of the UNROUNDED dout, in fp32 at worst (no rounding allowance).
    VecD db = to_double(c.db0), dbm(OC);
    for (int64_t o = 0; o < OC; ++o) {
      dbm[o] = std::fabs(db[o]);
      for (int64_t i = 0; i < N; ++i) {
        db[o] += c.dout[i * OC + o];
        dbm[o] += std::fabs(c.dout[i * OC + o]);
      }
    }
    EXPECT_TRUE(within(dB.host(), db, dbm, 2.0 * (N + 2) * std::ldexp(1.0, -24))) << "dbias";
  }
}

// A GEMM as wide as an LM head's vocabulary: the Kokkos backend runs it in panels of output features
// (rounded_gemm_panel: here 65536 and 4464 of 70000), putting forward's panels in their columns,
// accumulating dinp over the panels and writing dweight's rows panel by panel. Each result equals the
// double product of the rounded operands as the small case does (the panels change only the order of
// dinp's fp32 sums, within the bound).
TEST_P(MatmulPrecisionTest, WideGemmInPanelsMultipliesRoundedOperands) {
  constexpr int64_t N = 24, IC = 40, OC = 70000;
  ASSERT_LT(rounded_gemm_panel(N, IC, OC), OC) << "the case must be wide enough for panels";
  const VecF x = random_vec(N * IC, 81), w = random_vec(OC * IC, 82), b = random_vec(OC, 83);
  const VecF dout = random_vec(N * OC, 84), dx0 = random_vec(N * IC, 85), dw0 = random_vec(OC * IC, 86);
  Buf X(*k, x), W(*k, w), Bb(*k, b), out(*k, N * OC), D(*k, dout), dX(*k, dx0), dW(*k, dw0);
  k->set_matmul_precision(MatmulPrecision::BF16);
  k->matmul_forward(out.get(), X.get(), W.get(), Bb.get(), N, IC, OC);
  k->matmul_backward(dX.get(), dW.get(), nullptr, D.get(), X.get(), W.get(), N, IC, OC);
  const int bits = significant_bits(MatmulPrecision::BF16);
  const VecD xr = rounded(x, bits), wr = rounded(w, bits), dr = rounded(dout, bits);
  VecD bias_rows(N * OC);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) bias_rows[i * OC + o] = b[o];
  const Product fwd = product_abt(xr, wr, bias_rows, N, OC, IC);
  EXPECT_TRUE(within(out.host(), fwd.value, fwd.magnitude, bound_factor(IC, MatmulPrecision::BF16))) << "forward";
  const Product dxp = product_abt(dr, transposed(wr, OC, IC), to_double(dx0), N, IC, OC);
  EXPECT_TRUE(within(dX.host(), dxp.value, dxp.magnitude, bound_factor(OC, MatmulPrecision::BF16))) << "dinp";
  const Product dwp = product_abt(transposed(dr, N, OC), transposed(xr, N, IC), to_double(dw0), OC, IC, N);
  EXPECT_TRUE(within(dW.host(), dwp.value, dwp.magnitude, bound_factor(N, MatmulPrecision::BF16))) << "dweight";
}

// The rounding is not skipped: the results move away from the exact fp32 GEMM by far more than fp32
// summation could (measured on the Kokkos backend: bf16 116x, TF32 18x the fp32 bound at the worst
// element), and set_matmul_precision(FP32) brings back the exact GEMMs bit for bit.
TEST_P(MatmulPrecisionTest, RoundingChangesResultsAndFp32RestoresThem) {
  const Case c;
  const int64_t N = c.N, IC = c.IC, OC = c.OC;
  Buf X(*k, c.x), W(*k, c.w), out(*k, N * OC);
  auto forward = [&](MatmulPrecision p) {
    k->set_matmul_precision(p);
    k->matmul_forward(out.get(), X.get(), W.get(), nullptr, N, IC, OC);
    return out.host();
  };
  const VecF exact = forward(MatmulPrecision::FP32);
  const Product ref = product_abt(to_double(c.x), to_double(c.w), VecD(N * OC, 0.0), N, OC, IC);
  ASSERT_TRUE(within(exact, ref.value, ref.magnitude, bound_factor(IC, MatmulPrecision::FP32)));
  for (auto [p, factor] : {std::pair{MatmulPrecision::TF32, 3.0}, std::pair{MatmulPrecision::BF16, 20.0}}) {
    const VecF got = forward(p);
    double worst = 0.0;  // the largest departure from exact fp32, in units of that element's fp32 bound
    for (int64_t i = 0; i < N * OC; ++i)
      worst = std::max(worst, std::fabs(double(got[i]) - double(exact[i])) /
                                  (2.0 * (IC + 2) * std::ldexp(1.0, -24) * ref.magnitude[i]));
    EXPECT_GT(worst, factor) << (p == MatmulPrecision::BF16 ? "bf16" : "tf32") << ": the operands were not rounded";
  }
  EXPECT_TRUE(same_bits(forward(MatmulPrecision::FP32), exact));
}

// GEMM inputs given as bf16 patterns (GemmInput: a bf16 working copy's weights, a kept activation) give
// the bits of the same GEMMs on those values given as fp32, forward and backward, whether the patterns
// come alone (no values to fall back on) or with the values: under bf16 read as they are (CUDA: handed to
// cuBLASLt, or copied first when they are less than 16-byte aligned, the `offset` 1 below), under TF32
// and fp32 widened. The values are random fp32 rounded to bf16 on the device (round_to_bf16, which also
// writes the patterns); the wide case runs in panels on the Kokkos backend (rounded_gemm_panel).
TEST_P(MatmulPrecisionTest, Bf16PatternInputsGiveTheBitsOfTheirValues) {
  struct Shape {
    int64_t N, IC, OC;
    std::vector<MatmulPrecision> precisions;
  };
  const Shape shapes[] = {{37, 70, 45, {MatmulPrecision::BF16, MatmulPrecision::TF32, MatmulPrecision::FP32}},
                          {24, 40, 70000, {MatmulPrecision::BF16}}};
  for (const Shape& sh : shapes) {
    const int64_t N = sh.N, IC = sh.IC, OC = sh.OC;
    Buf X(*k, random_vec(N * IC, 91)), W(*k, random_vec(OC * IC, 92)), Bb(*k, random_vec(OC, 93));
    Buf D(*k, random_vec(N * OC, 94));
    const VecF dx0 = random_vec(N * IC, 95), dw0 = random_vec(OC * IC, 96), db0 = random_vec(OC, 97);
    for (const int64_t offset : {0, 1}) {
      // Patterns at element `offset` of their buffers; X and W rounded in place to the patterns' values.
      uint16_t* xp = k->alloc_bf16(N * IC + offset);
      uint16_t* wp = k->alloc_bf16(OC * IC + offset);
      k->round_to_bf16(X.get(), xp + offset, N * IC);
      k->round_to_bf16(W.get(), wp + offset, OC * IC);
      struct Result {
        VecF out, dx, dw, db;
      };
      auto run = [&](GemmInput x, GemmInput w) {
        Buf out(*k, N * OC), dX(*k, dx0), dW(*k, dw0), dB(*k, db0);
        k->matmul_forward(out.get(), x, w, Bb.get(), N, IC, OC);
        k->matmul_backward(dX.get(), dW.get(), dB.get(), D.get(), x, w, N, IC, OC);
        return Result{out.host(), dX.host(), dW.host(), dB.host()};
      };
      const GemmInput x_values(X.get()), w_values(W.get());
      const GemmInput x_patterns = GemmInput::patterns(xp + offset), w_patterns = GemmInput::patterns(wp + offset);
      const GemmInput x_both(X.get(), xp + offset), w_both(W.get(), wp + offset);
      for (const MatmulPrecision p : sh.precisions) {
        k->set_matmul_precision(p);
        const Result want = run(x_values, w_values);
        ASSERT_GT(max_abs(to_double(want.out)), 1e-3) << "degenerate case";
        const std::pair<GemmInput, GemmInput> forms[] = {
            {x_patterns, w_patterns}, {x_patterns, w_values}, {x_values, w_patterns}, {x_both, w_both}};
        for (size_t f = 0; f < std::size(forms); ++f) {
          SCOPED_TRACE(fmt::format("{}x{}x{}, {}, offset {}, form {}", N, IC, OC, to_string(p), offset, f));
          const Result got = run(forms[f].first, forms[f].second);
          EXPECT_TRUE(same_bits(got.out, want.out)) << "forward";
          EXPECT_TRUE(same_bits(got.dx, want.dx)) << "dinp";
          EXPECT_TRUE(same_bits(got.dw, want.dw)) << "dweight";
          EXPECT_TRUE(same_bits(got.db, want.db)) << "dbias";
        }
      }
      k->free(xp);
      k->free(wp);
    }
  }
}

TRIDENT_INSTANTIATE_KERNEL_SUITE(MatmulPrecisionTest);

}  // namespace
}  // namespace trident::kt
