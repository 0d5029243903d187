// Shared by the op-parity harness (test_ops.cpp, test_ops_moe.cpp): host weights quantized with
// src/quant and their exact dequantization, the CPU's rounding of activations, an f64 matmul
// reference, the weight types and shapes every op is tried on, and the test fixture.
#pragma once

#include "cpu/matmul.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "quant/blocks.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

namespace nitro::cuda::test {

/// x rounded to the vec-dot type of weight type t, as the CPU engine holds it: quantize then
/// dequantize rows of n values with src/quant's reference code.
inline std::vector<float> rounded(GgmlType t, const std::vector<float>& x, int64_t n) {
    const GgmlType vdt = cpu::vec_dot_type(t);
    if (vdt == GgmlType::F32) return x;
    const size_t rb = row_size(vdt, n);
    std::vector<uint8_t> q(rb);
    std::vector<float> out(x.size());
    for (size_t r = 0; r * n < x.size(); ++r) {
        quantize(vdt, x.data() + r * n, q.data(), n);
        dequantize(vdt, q.data(), out.data() + r * n, n);
    }
    return out;
}

struct HostWeight {
    GgmlType type;
    int64_t ne0, rows;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;  // exactly dequantized (src/quant), rows x ne0
};

inline HostWeight make_weight(GgmlType t, int64_t ne0, int64_t rows, float sigma = 0.05f) {
    HostWeight w{t, ne0, rows, {}, {}};
    const size_t rb = row_size(t, ne0);
    w.bytes.resize(rb * rows);
    auto f = randn(static_cast<size_t>(ne0 * rows), sigma);
    for (int64_t r = 0; r < rows; ++r) quantize(t, f.data() + r * ne0, w.bytes.data() + r * rb, ne0);
    w.deq.resize(static_cast<size_t>(ne0 * rows));
    dequantize(t, w.bytes.data(), w.deq.data(), ne0 * rows);
    return w;
}

inline DWeight dev_weight(DeviceContext& ctx, const HostWeight& w) {
    DWeight d;
    d.type = w.type;
    d.data = to_dev(ctx, w.bytes);
    d.ne0 = w.ne0;
    d.n_rows = w.rows;
    d.row_bytes = row_size(w.type, w.ne0);
    return d;
}

inline std::vector<double> ref_matmul(const HostWeight& w, const std::vector<float>& x, int64_t n) {
    std::vector<double> out(static_cast<size_t>(n * w.rows));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < w.rows; ++r) {
            double s = 0;
            for (int64_t i = 0; i < w.ne0; ++i) s += static_cast<double>(w.deq[r * w.ne0 + i]) * x[t * w.ne0 + i];
            out[t * w.rows + r] = s;
        }
    return out;
}

inline const GgmlType kTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::MXFP4,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};
inline const std::pair<int64_t, int64_t> kShapes[] = {{256, 96}, {2048, 300}, {2880, 515}, {4096, 77}};

inline bool shape_ok(GgmlType t, int64_t ne0) { return ne0 % type_traits(t).block_size == 0; }

class CudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        require_gpu();
        ctx = std::make_unique<DeviceContext>(0, 0.0);
    }
    std::unique_ptr<DeviceContext> ctx;
};

}  // namespace nitro::cuda::test
