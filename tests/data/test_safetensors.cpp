// safetensors: round trip, interchange with an independent json+numpy implementation, and rejection
// of malformed files with the file and tensor named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data_test_util.hpp"
#include "safetensors/safetensors.hpp"

namespace trident {
namespace {

using datatest::error_of;
using datatest::TempDir;
using datatest::write_bytes;
using testing::HasSubstr;

const char* kPython = "/usr/bin/python3";

std::string tool() { return std::string(TRIDENT_TEST_DATA_DIR) + "/tools/safetensors_np.py"; }

struct Fixture {
  std::vector<float> wte, bias, scalar, empty;
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> meta{{"format", "pt"}, {"step", "12"}, {"note", "quotes \" and \\ and ünïcode"}};
  Fixture() {
    for (int i = 0; i < 12; ++i) wte.push_back(0.125f * static_cast<float>(i) - 0.7f);
    bias = {-0.0f, 1e-38f, 3.4e38f, -1.5f};  // -0, a denormal-adjacent value, near max
    scalar = {42.5f};
    // Deliberately not in name order.
    tensors = {{"wte.weight", {4, 3}, wte.data()},
               {"h.0.ln_1.bias", {4}, bias.data()},
               {"step_scale", {}, scalar.data()},
               {"empty", {0, 5}, nullptr}};
  }
};

TEST(Safetensors, RoundTrip) {
  TempDir dir;
  Fixture fx;
  const std::string path = dir / "model.safetensors";
  write_safetensors(path, fx.tensors, fx.meta);
  // Written atomically: no temporary file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1);

  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"empty", "h.0.ln_1.bias", "step_scale", "wte.weight"}));
  EXPECT_TRUE(r.has("wte.weight"));
  EXPECT_FALSE(r.has("wpe.weight"));
  EXPECT_EQ(r.shape("wte.weight"), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(r.shape("step_scale"), std::vector<int64_t>{});
  EXPECT_EQ(r.shape("empty"), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(r.dtype("wte.weight"), "F32");
  EXPECT_EQ(r.numel("wte.weight"), 12);
  EXPECT_EQ(r.read_f32("wte.weight", {4, 3}), fx.wte);
  std::vector<float> b(4);
  r.read_f32("h.0.ln_1.bias", b.data(), {4});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(&b[i], &fx.bias[i], 4), 0) << i;  // bit-exact, -0 included
  EXPECT_EQ(r.read_f32("step_scale", {}), fx.scalar);
  EXPECT_TRUE(r.read_f32("empty", {0, 5}).empty());
  EXPECT_EQ(r.metadata(), fx.meta);
  EXPECT_EQ(r.metadata("step"), "12");
  EXPECT_TRUE(r.has_metadata("format"));
  EXPECT_FALSE(r.has_metadata("nope"));

  // The layout the Python library writes: header padded to 8, tensors packed in name order.
  const std::string raw = datatest::read_bytes(path);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["empty"]["data_offsets"], nlohmann::json({0, 0}));
  EXPECT_EQ(header["h.0.ln_1.bias"]["data_offsets"], nlohmann::json({0, 16}));
  EXPECT_EQ(header["step_scale"]["data_offsets"], nlohmann::json({16, 20}));
  EXPECT_EQ(header["wte.weight"]["data_offsets"], nlohmann::json({20, 68}));
  EXPECT_EQ(raw.size(), 8 + n + 68);

  // Overwriting an existing file works (rename over it), without metadata this time.
  std::vector<float> one{1.0f};
  write_safetensors(path, {{"x", {1}, one.data()}});
  SafetensorsReader r2(path);
  EXPECT_EQ(r2.names(), std::vector<std::string>{"x"});
  EXPECT_TRUE(r2.metadata().empty());
}

TEST(Safetensors, PythonNumpyReadsOurFile) {
  const std::string missing = test::missing_python_modules({"numpy"});
  if (!missing.empty()) FAIL() << missing;
  TempDir dir;
  Fixture fx;
  fx.bias[2] = 3.0e38f;  // finite values only (JSON has no infinities)
  const std::string path = dir / "ours.safetensors";
  write_safetensors(path, fx.tensors, fx.meta);
  std::string out;
  const int rc = test::run_command(fmt::format("{} {} dump {}", kPython, tool(), path), &out);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ((j["metadata"].get<std::map<std::string, std::string>>()), fx.meta);
  const auto& t = j["tensors"];
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t["wte.weight"]["dtype"], "F32");
  EXPECT_EQ(t["wte.weight"]["shape"], nlohmann::json({4, 3}));
  EXPECT_EQ(t["wte.weight"]["values"].get<std::vector<float>>(), fx.wte);
  EXPECT_EQ(t["h.0.ln_1.bias"]["values"].get<std::vector<float>>(), fx.bias);
  EXPECT_EQ(t["step_scale"]["shape"], nlohmann::json::array());
  EXPECT_EQ(t["step_scale"]["values"].get<std::vector<float>>(), fx.scalar);
  EXPECT_EQ(t["empty"]["shape"], nlohmann::json({0, 5}));
  EXPECT_TRUE(t["empty"]["values"].empty());
}

TEST(Safetensors, WeReadPythonNumpyFile) {
  const std::string missing = test::missing_python_modules({"numpy"});
  if (!missing.empty()) FAIL() << missing;
  TempDir dir;
  const std::string path = dir / "theirs.safetensors";
  std::string out;
  const int rc = test::run_command(fmt::format("{} {} write {}", kPython, tool(), path), &out);
  ASSERT_EQ(rc, 0) << out;
  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a.weight", "b.half", "c.bf16", "d.double", "e.scalar"}));
  EXPECT_EQ(r.metadata("format"), "pt");
  EXPECT_EQ(r.metadata("source"), "safetensors_np.py");
  EXPECT_EQ(r.read_f32("a.weight", {2, 3}), (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));
  EXPECT_EQ(r.dtype("b.half"), "F16");
  const auto h = r.read_f32("b.half", {5});
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], 0.099975586f);
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_EQ(h[4], std::ldexp(1.0f, -24));  // the smallest subnormal half
  EXPECT_EQ(r.dtype("c.bf16"), "BF16");
  const auto bf = r.read_f32("c.bf16", {4});
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], -3.0f);
  EXPECT_EQ(bf[2], 0.15625f);
  // 1e30 truncated to bf16: the float whose low 16 bits are cleared.
  float f30 = 1.0e30f;
  uint32_t bits;
  std::memcpy(&bits, &f30, 4);
  bits &= 0xffff0000u;
  float expected;
  std::memcpy(&expected, &bits, 4);
  EXPECT_EQ(bf[3], expected);
  EXPECT_EQ(r.read_f32("d.double", {2, 1}), (std::vector<float>{0.25f, -7.0f}));
  EXPECT_EQ(r.read_f32("e.scalar", {}), std::vector<float>{7.25f});
}

// A safetensors file from a header text and a data section.
std::string st_file(const std::string& header, const std::string& data) {
  std::string s;
  datatest::append_le<uint64_t>(s, header.size());
  return s + header + data;
}

std::string open_error(const std::string& path, const std::string& bytes) {
  write_bytes(path, bytes);
  return error_of([&] { SafetensorsReader r(path); });
}

TEST(SafetensorsErrors, MalformedFilesNameFileAndTensor) {
  TempDir dir;
  const std::string p = dir / "bad.safetensors";
  const std::string d4(4, '\0'), d8(8, '\0'), d12(12, '\0');
  struct Case {
    std::string bytes;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"abc", {"truncated: 3 bytes"}},
      {st_file("{}", "").substr(0, 8) + "{", {"header length 2", "exceeds"}},
      {st_file(R"({"w": {"dtype": "F32", )", d4), {"not valid JSON"}},
      {st_file("[1, 2]", ""), {"not a JSON object"}},
      {st_file(R"({"w": [1]})", ""), {"tensor 'w'", "not a JSON object"}},
      {st_file(R"({"w": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}})", d4), {"tensor 'w'", "unknown dtype \"F31\""}},
      {st_file(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", d4), {"tensor 'w'", "\"dtype\""}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", d4), {"tensor 'w'", "bad shape"}},
      {st_file(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", d8), {"tensor 'w'", "\"shape\""}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [1]}})", d4), {"tensor 'w'", "data_offsets"}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", d4), {"tensor 'w'", "data_offsets"}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", d4),
       {"tensor 'w'", "outside the data section of 4 bytes"}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", d4), {"tensor 'w'", "outside"}},
      {st_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", d8), {"tensor 'w'", "needs 12"}},
      {st_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
               d12),
       {"'a' [0, 8]", "'b' [4, 12]", "overlap"}},
      {st_file(R"({"__metadata__": {"k": 1}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", d4),
       {"metadata value of 'k'"}},
      {st_file(R"({"__metadata__": [], "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", d4),
       {"__metadata__"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string msg = open_error(p, cases[i].bytes);
    EXPECT_THAT(msg, HasSubstr(p)) << "case " << i;
    for (const auto& e : cases[i].expect) EXPECT_THAT(msg, HasSubstr(e)) << "case " << i;
  }
  EXPECT_THAT(error_of([&] { SafetensorsReader r(dir / "missing.safetensors"); }),
              HasSubstr(dir / "missing.safetensors"));
}

TEST(SafetensorsErrors, ReadF32NamesTensor) {
  TempDir dir;
  const std::string p = dir / "ok.safetensors";
  // One F32 [2, 2] and one I64 [1]; gaps and trailing bytes are tolerated.
  std::string data(8, '\0');
  std::vector<float> w{1, 2, 3, 4};
  data.append(reinterpret_cast<const char*>(w.data()), 16);
  write_bytes(p, st_file(R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
                             "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]}})",
                         data + "xx"));
  SafetensorsReader r(p);
  EXPECT_EQ(r.read_f32("w", {2, 2}), w);
  std::vector<float> out(4);
  std::string msg = error_of([&] { r.read_f32("wpe.weight", out.data(), {2, 2}); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("no tensor named 'wpe.weight'"));
  msg = error_of([&] { r.read_f32("w", out.data(), {4}); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("tensor 'w' has shape [2, 2], expected [4]"));
  msg = error_of([&] { r.read_f32("ids", out.data(), {1}); });
  EXPECT_THAT(msg, HasSubstr("tensor 'ids' has dtype I64"));
  EXPECT_THAT(error_of([&] { r.shape("nope"); }), HasSubstr("no tensor named 'nope'"));
  EXPECT_THAT(error_of([&] { r.metadata("format"); }), HasSubstr("no metadata key 'format'"));
}

TEST(SafetensorsErrors, WriterRejectsBadInputAndNamesPath) {
  TempDir dir;
  std::vector<float> v{1, 2};
  const std::string p = dir / "w.safetensors";
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"a", {2}, v.data()}, {"a", {1}, v.data()}}); }),
              HasSubstr("tensor 'a': the name appears twice"));
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"__metadata__", {2}, v.data()}}); }), HasSubstr("reserved"));
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"a", {-2}, v.data()}}); }), HasSubstr("negative dimension"));
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"a", {2}, nullptr}}); }), HasSubstr("null data"));
  EXPECT_FALSE(std::filesystem::exists(p));
  const std::string nodir = dir / "no/such/dir/w.safetensors";
  const std::string msg = error_of([&] { write_safetensors(nodir, {{"a", {2}, v.data()}}); });
  EXPECT_THAT(msg, HasSubstr(nodir));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace trident
