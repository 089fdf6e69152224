#!/usr/bin/env python3
"""The CPU-testable parts of benchmarks/gpu/compare_bf16.sh (the comparison with llm.c and PyTorch on a
GPU): llm.c's token shard format (llmc_shards.py), the table of ms/step and MFU from recorded log lines of
the three systems (compare_table.py), its peak table against trident's (src/train/gpu_peaks.cpp), and the
shell scripts' syntax. Expected figures are computed here or taken from ../shared/notes/gpu/README.md's
table (llm.c 34.6 ms -> 473,526 tokens/s, 38.5 %; PyTorch 774M 73,368 tokens/s, 36.6 %, on an H100 SXM at
989 TFLOP/s), not from the scripts' output.
  python3 tests/benchmarks/test_gpu_compare.py        (ctest: test_gpu_compare_scripts)
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("TRIDENT_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GPU = os.path.join(ROOT, "benchmarks", "gpu")
sys.path.insert(0, GPU)
import compare_table  # noqa: E402
import llmc_shards  # noqa: E402


def llmc_line(step, total, ms):
    # llm.c train_gpt2.cu's step line: "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e |
    # %.2f ms | %.1f%% bf16 MFU | %.0f tok/s"
    return "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s" % (
        step, total, 10.9876, float("nan"), 3.21, float("nan"), 3e-4, ms, 38.1, 470000.0)


class Shards(unittest.TestCase):
    def test_header_and_tokens(self):
        d = tempfile.mkdtemp()
        try:
            path = os.path.join(d, "s.bin")
            tokens = [0, 1, 50256, 65535, 7]
            llmc_shards.write_shard(path, tokens)
            data = open(path, "rb").read()
            self.assertEqual(len(data), 256 * 4 + 2 * len(tokens))
            header = struct.unpack("<256i", data[:1024])
            self.assertEqual(header[:3], (20240520, 1, len(tokens)))
            self.assertEqual(set(header[3:]), {0})
            self.assertEqual(list(struct.unpack("<%dH" % len(tokens), data[1024:])), tokens)
        finally:
            shutil.rmtree(d)

    def test_command_writes_train_and_val_shards_of_random_tokens(self):
        d = tempfile.mkdtemp()
        try:
            subprocess.run([sys.executable, os.path.join(GPU, "llmc_shards.py"), d, "--train-tokens", "5000",
                            "--val-tokens", "300", "--vocab", "50257"], check=True, stdout=subprocess.DEVNULL)
            for name, n in (("train", 5000), ("val", 300)):
                data = open(os.path.join(d, f"rand_{name}_000000.bin"), "rb").read()
                self.assertEqual(struct.unpack("<3i", data[:12]), (20240520, 1, n))
                toks = struct.unpack("<%dH" % n, data[1024:])
                self.assertLess(max(toks), 50257)
                self.assertGreater(len(set(toks)), n // 2)  # random, not constant
        finally:
            shutil.rmtree(d)

    def test_vocab_must_fit_uint16(self):
        with self.assertRaises(ValueError):
            llmc_shards.random_tokens(3, 65537, 0)


class Table(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.d)

    def write(self, name, text):
        with open(os.path.join(self.d, name), "w") as f:
            f.write(text)

    def record(self):
        self.write("device.txt", "NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB\ncommit abc1234\n")
        # llm.c 124M: two slow warm-up steps, then 15 x 34.5 and 15 x 34.7 ms: median 34.6.
        lines = ["step_ms noise", "val loss 11.0", llmc_line(1, 32, 900.0), llmc_line(2, 32, 60.0)]
        lines += [llmc_line(s, 32, 34.5 if s % 2 else 34.7) for s in range(3, 33)]
        self.write("llmc-124M.log", "\n".join(lines) + "\ntotal average iteration time: 34.6 ms\n")
        # PyTorch 774M: a RESULT line whose steps have the median 111.656 ms.
        steps = [111.5] * 14 + [111.656] * 2 + [111.8] * 14
        self.write("pytorch-774M.log", "compiling...\nRESULT " + json.dumps(
            {"system": "pytorch-compile", "ms_per_step": 111.66, "step_ms": steps}) + "\n")
        # trident 124M: metrics with a resume marker, warm-up steps 1-2, then 15 x 220 and 15 x 230 ms.
        recs = [{"event": "resume", "step": 0}, {"step": 1, "step_ms": 5000.0}, {"step": 2, "step_ms": 400.0}]
        recs += [{"step": s, "step_ms": 220.0 if s % 2 else 230.0, "mfu": 0.1} for s in range(3, 33)]
        self.write("trident-124M.jsonl", "\n".join(json.dumps(r) for r in recs) + "\n")
        self.write("trident-774M.log", "error: something\n")
        self.write("phases.tsv", "trident-774M\t1\t12\nllmc-774M\t124\t90\ntrident-124M\t0\t20\n")

    def test_rows_from_recorded_logs(self):
        self.record()
        rows = {(r["system"], r["shape"]): r for r in compare_table.rows(self.d, "NVIDIA H100 80GB HBM3")}
        llmc = rows[("llmc", "124M")]
        self.assertEqual(llmc["timed_steps"], 30)
        self.assertAlmostEqual(llmc["ms_per_step"], 34.6, places=9)
        self.assertAlmostEqual(llmc["tokens_per_s"], 473526, delta=1)
        self.assertAlmostEqual(100 * llmc["mfu"], 38.5, delta=0.05)
        torch = rows[("pytorch", "774M")]
        self.assertAlmostEqual(torch["tokens_per_s"], 73368, delta=1)
        self.assertAlmostEqual(100 * torch["mfu"], 36.6, delta=0.05)
        tri = rows[("trident", "124M")]
        self.assertEqual(tri["timed_steps"], 30)
        self.assertAlmostEqual(tri["ms_per_step"], 225.0)
        # (6 x 124,475,904 + 6 x 12 x 1024 x 768) x 16384 / 0.225 / 989e12
        self.assertAlmostEqual(tri["mfu"], 803478528 * 16384 / 0.225 / 989e12, places=12)
        self.assertNotIn("ms_per_step", rows[("trident", "774M")])
        self.assertNotIn("ms_per_step", rows[("llmc", "774M")])

    def test_markdown_names_the_device_peak_and_every_run(self):
        self.record()
        subprocess.run([sys.executable, os.path.join(GPU, "compare_table.py"), self.d, "--commit", "commit abc1234"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.d, "compare_bf16.md")) as f:
            md = f.read()
        self.assertIn("Device: NVIDIA H100 80GB HBM3; MFU against 989 TFLOP/s", md)
        self.assertRegex(md, r"\| llm\.c [^|]*\| 124M \(12L, 768, 12h\), T 1024 \| 16 \| 34\.6 \| 473,526 \| 38\.5 % \|")
        self.assertRegex(md, r"\| PyTorch[^|]*\| 774M \(36L, 1280, 20h\), T 1024 \| 8 \| 111\.7 \| 73,368 \| 36\.6 % \|")
        self.assertRegex(md, r"\| trident[^|]*\| 124M [^|]*\| 16 \| 225\.0 \| 72,818 \| 5\.9 % \|")
        self.assertRegex(md, r"\| trident[^|]*\| 774M [^|]*\| 8 \| - \| - \| - \| failed, exit status 1 after 12 s; "
                             r"see trident-774M\.log \|")
        self.assertRegex(md, r"\| llm\.c [^|]*\| 774M [^|]*\| 8 \| - \| - \| - \| timed out after 90 s")
        self.assertRegex(md, r"\| PyTorch[^|]*\| 124M [^|]*\| 16 \| - \| - \| - \| not run \|")
        self.assertEqual(md.count("\n| "), 7)  # the header and 6 rows
        self.assertIn('train.precision = "bf16"', md)
        j = json.load(open(os.path.join(self.d, "compare_bf16.json")))
        self.assertEqual(j["peak_tflops"], 989)

    def test_unknown_device_has_no_mfu(self):
        self.record()
        text = compare_table.markdown(compare_table.rows(self.d, "NVIDIA L40S"), "NVIDIA L40S")
        self.assertIn("no peak: the device is not in the data-sheet table", text)
        self.assertRegex(text, r"\| 34\.6 \| 473,526 \| n/a \|")

    def test_gpt2_parameter_counts(self):
        # llm.c's d12 and d36 with the vocabulary padded to 50304 (the GPU notes' N).
        self.assertEqual(compare_table.gpt2_parameters(12, 768), 124475904)
        self.assertEqual(compare_table.gpt2_parameters(36, 1280), 774090240)


class PeakTables(unittest.TestCase):
    def test_python_table_is_trident_table(self):
        src = open(os.path.join(ROOT, "src", "train", "gpu_peaks.cpp")).read()
        entries = re.findall(r'\{"([^"]+)", "[^"]+", ([0-9.]+)\}', src)
        self.assertGreaterEqual(len(entries), 10)
        self.assertEqual({name: float(v) for name, v in entries},
                         {name: float(v) for name, v in compare_table.PEAKS.items()})


class Scripts(unittest.TestCase):
    def test_shell_syntax(self):
        for name in ("compare_bf16.sh", "stage_llmc.sh", "build_llmc.sh", "llmc_cuda13.sh",
                     "run_device_session.sh"):
            r = subprocess.run(["bash", "-n", os.path.join(GPU, name)], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, name + ": " + r.stderr)

    def test_python_syntax(self):
        for name in ("pytorch_gpu_step.py", "pytorch_attention.py", "compare_table.py", "llmc_shards.py"):
            with open(os.path.join(GPU, name)) as f:
                compile(f.read(), name, "exec")  # raises SyntaxError

    def test_cuda13_patch_turns_the_fallback_into_an_error_exit(self):
        # A stand-in with the two lines the patch replaces (the shape it checks for), not llm.c's file.
        d = tempfile.mkdtemp()
        try:
            os.makedirs(os.path.join(d, "llmc"))
            f = os.path.join(d, "llmc", "cuda_utils.cuh")
            open(f, "w").write("int f(void** out, size_t bytes, const char* file, int line) {\n"
                               "  if (oom) {\n"
                               "    cudaCheck_(cudaMallocManaged(out, bytes), file, line);\n"
                               "    cudaCheck_(cudaMemAdvise(*out, bytes, X, cudaCpuDeviceId), file, line);\n"
                               "    return 1;\n  }\n}\n")
            for _ in range(2):  # idempotent
                subprocess.run(["bash", os.path.join(GPU, "llmc_cuda13.sh"), d], check=True, stdout=subprocess.DEVNULL)
            text = open(f).read()
            self.assertNotIn("cudaMemAdvise", text)
            self.assertNotIn("cudaMallocManaged", text)
            self.assertIn("exit(EXIT_FAILURE);", text)
            open(f, "w").write("nothing to patch\n")
            r = subprocess.run(["bash", os.path.join(GPU, "llmc_cuda13.sh"), d], capture_output=True)
            self.assertNotEqual(r.returncode, 0)
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main(verbosity=2)
