// The cases: every launcher of ltx_cuda.h on the CPU emulation (emu.h) against float64 references.
//
//   cuda-emu [SUITE ...]   suites: rms mod addmod gated gelu rope qk qkgrid empty (default: all),
//                          or one of fault-misaligned / -overflow / -deadlock / -race,
//                          kernels with a bug that the emulation must report
//                          (tests/test_cuda_emulation.py says how)
//
// Each check poisons the output with NaN, runs the op, and requires every output element within
// one rounding (16-bit types) or 2e-5 (fp32) of a float64 reference computed from the same
// rounded inputs, and every input unchanged. Buffers are exactly as long as the tensor and start
// on a 64-byte boundary or `off` elements past it, so a read or write past the end (or, to ASan's
// 8-byte granularity, before the start) is an AddressSanitizer report and a misaligned 16-byte
// access an UndefinedBehaviorSanitizer one.
//
// Output, one line each: FAIL <check>: ...; SUITE <name> <checks>; KERNEL <launches> <name> for
// every kernel instantiation in the binary; WORST <dtype> <largest error / tolerance>;
// RESULT checks=N failed=F launches=L. On stderr, CASE <check> before each check runs.
#include "emu.h"
#include "ltx_cuda.h"

#include <map>
#include <new>
#include <random>
#include <set>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#endif

extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

using namespace ltx_cuda;
using std::to_string;

static std::mt19937 rng(1234);
static int failures = 0, checks = 0;

// A tensor of n elements of dtype dt, `off` elements past a 64-byte boundary, with no slack after
// it (and, as far as ASan's 8-byte granules allow, none before it).
struct Buf {
  DType dt;
  int64_t n;
  int off;
  unsigned char* base;
  void* p;
  std::vector<unsigned char> saved;

  Buf(DType d, int64_t n_, int off_ = 0) : dt(d), n(n_), off(off_) {
    base = static_cast<unsigned char*>(::operator new(bytes() + off * esize(), std::align_val_t(64)));
    p = base + off * esize();
    POISON(base, off * esize());
  }
  Buf(const Buf&) = delete;
  ~Buf() { ::operator delete(base, std::align_val_t(64)); }
  size_t esize() const { return dt == DType::F32 ? 4 : 2; }
  size_t bytes() const { return static_cast<size_t>(n) * esize(); }
  float* f32() const { return static_cast<float*>(p); }
  // A pointer `elems` elements into the buffer (a view's data_ptr).
  void* at(int64_t elems) const { return static_cast<unsigned char*>(p) + elems * esize(); }

  void set(int64_t i, float v) {
    if (dt == DType::F32)
      static_cast<float*>(p)[i] = v;
    else if (dt == DType::F16)
      static_cast<__half*>(p)[i] = __float2half_rn(v);
    else
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  }
  double get(int64_t i) const {
    if (dt == DType::F32) return static_cast<float*>(p)[i];
    if (dt == DType::F16) return __half2float(static_cast<__half*>(p)[i]);
    return __bfloat162float(static_cast<__nv_bfloat16*>(p)[i]);
  }
  Buf& randn(float scale = 1.0f) {
    std::normal_distribution<float> d(0.f, scale);
    for (int64_t i = 0; i < n; ++i) set(i, d(rng));
    return keep();
  }
  // Remembers the contents (an input), for unchanged().
  Buf& keep() {
    saved.assign(static_cast<unsigned char*>(p), static_cast<unsigned char*>(p) + bytes());
    return *this;
  }
  Buf& poison() {
    for (int64_t i = 0; i < n; ++i) set(i, NAN);
    return *this;
  }
  bool unchanged() const { return bytes() == 0 || std::memcmp(saved.data(), p, bytes()) == 0; }
};

static const char* dname(DType d) { return d == DType::F32 ? "f32" : d == DType::F16 ? "f16" : "bf16"; }
static int pack(DType d) { return d == DType::F32 ? 4 : 8; }  // elements per 16-byte vector

// Relative tolerance: 2e-5 for fp32 (reduction order, fast rsqrt/exp on the GPU); for 16-bit types
// 1.25x the largest relative rounding error (2^-8 bf16, 2^-11 fp16), i.e. one rounding of an fp32
// result. The absolute part covers results that cancel to near zero.
static void tol(DType d, double& rtol, double& atol) {
  if (d == DType::F32) {
    rtol = 2e-5; atol = 2e-5;
  } else if (d == DType::F16) {
    rtol = 1.25 * std::ldexp(1.0, -11); atol = 1e-5;
  } else {
    rtol = 1.25 * std::ldexp(1.0, -8); atol = 1e-5;
  }
}
static std::map<std::string, double> worst;  // dtype -> largest error / tolerance seen

// Names the check on stderr (unbuffered) before it runs: the line before a sanitizer report or an
// EMU ERROR says which case died.
static void begin(const std::string& what) {
  std::fprintf(stderr, "CASE %s\n", what.c_str());
  emu::recent.clear();
}

static std::string launched() {
  std::string s;
  std::set<std::string> seen;
  for (const auto& k : emu::recent)
    if (seen.insert(k).second) s += (s.empty() ? "" : "; ") + k;
  return s;
}

// `out` against ref: every element written and close; `inputs` unchanged.
static void compare(const std::string& what, const Buf& out, const std::vector<double>& ref,
                    std::initializer_list<const Buf*> inputs = {}) {
  ++checks;
  double rtol, atol;
  tol(out.dt, rtol, atol);
  int64_t bad = 0, first = -1;
  double& w = worst[dname(out.dt)];
  for (int64_t i = 0; i < static_cast<int64_t>(ref.size()); ++i) {
    const double o = out.get(i), r = ref[i];
    bool ok;
    if (std::isnan(r) || std::isinf(r)) {
      ok = std::isnan(r) ? std::isnan(o) : o == r;
    } else {
      const double ratio = std::fabs(o - r) / (atol + rtol * std::fabs(r));
      ok = !std::isnan(o) && ratio <= 1.0;
      if (ok) w = std::max(w, ratio);
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  std::string why;
  if (bad)
    why = to_string(bad) + " of " + to_string(ref.size()) + " wrong, first [" + to_string(first) +
          "]: got " + to_string(out.get(first)) + " want " + to_string(ref[first]);
  for (const Buf* in : inputs)
    if (!in->unchanged()) why += (why.empty() ? "" : "; ") + std::string("an input was written");
  if (!why.empty()) {
    ++failures;
    std::printf("FAIL %s: %s [%s]\n", what.c_str(), why.c_str(), launched().c_str());
  }
}

// ---- references -------------------------------------------------------------------------------

static std::vector<double> ref_norm_row(const Buf& x, int64_t r, int64_t dim, double eps, const Buf* w) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) {
    const double v = x.get(r * dim + i);
    ss += v * v;
  }
  const double inv = 1.0 / std::sqrt(ss / dim + eps);
  std::vector<double> y(dim);
  for (int64_t i = 0; i < dim; ++i) y[i] = x.get(r * dim + i) * inv * (w ? w->get(i) : 1.0);
  return y;
}
static void ref_rope(std::vector<double>& v, const float* c, const float* s) {
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    const double a = v[i], b = v[i + 1];
    v[i] = a * c[i] - b * s[i];
    v[i + 1] = b * c[i + 1] + a * s[i + 1];
  }
}

// Modulation / gate layouts, as (elements, offset of the view, batch stride, token stride):
// 0 [B,1,D]; 1 [B,S,D]; 2 chunk 2 of ada.unbind(2) of [B,S,6,D]; 3 chunk 4 of ada.unbind of
// [B,1,6,D]; 4 [1,1,D] broadcast over batch and tokens.
struct Layout {
  int64_t n, base, bs, ts;
};
static Layout mod_layout(int mode, int64_t B, int64_t S, int64_t D) {
  switch (mode) {
    case 0: return {B * D, 0, D, 0};
    case 1: return {B * S * D, 0, S * D, D};
    case 2: return {B * S * 6 * D, 2 * D, S * 6 * D, 6 * D};
    case 3: return {B * 6 * D, 4 * D, 6 * D, 0};
    default: return {D, 0, 0, 0};
  }
}

// ---- one check per call -------------------------------------------------------------------------

static void check_rms(DType dt, int64_t rows, int64_t dim, bool weight, int off = 0) {
  Buf x(dt, rows * dim, off), w(dt, dim), out(dt, rows * dim);
  x.randn();
  w.randn();
  out.poison();
  const std::string what = "rms_norm " + std::string(dname(dt)) + " rows=" + to_string(rows) +
                           " dim=" + to_string(dim) + (weight ? " weight" : "") + " off=" + to_string(off);
  begin(what);
  rms_norm(out.p, x.p, weight ? w.p : nullptr, rows, dim, 1e-6f, dt, nullptr);
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    auto y = ref_norm_row(x, r, dim, 1e-6, weight ? &w : nullptr);
    ref.insert(ref.end(), y.begin(), y.end());
  }
  compare(what, out, ref, {&x, &w});
}

static void check_modulate(DType dt, int64_t B, int64_t S, int64_t D, int mode, bool weight, int off = 0) {
  const int64_t rows = B * S;
  const Layout l = mod_layout(mode, B, S, D);
  Buf x(dt, rows * D, off), sc(dt, l.n), sh(dt, l.n), w(dt, D), out(dt, rows * D);
  x.randn();
  sc.randn(0.5f);
  sh.randn();
  w.randn();
  out.poison();
  const std::string what = "rms_norm_modulate " + std::string(dname(dt)) + " B=" + to_string(B) +
                           " S=" + to_string(S) + " D=" + to_string(D) + " layout=" + to_string(mode) +
                           (weight ? " weight" : "") + " off=" + to_string(off);
  begin(what);
  rms_norm_modulate(out.p, x.p, sc.at(l.base), sh.at(l.base), weight ? w.p : nullptr, rows, S, D,
                    l.bs, l.ts, 1e-6f, dt, nullptr);
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    auto y = ref_norm_row(x, r, D, 1e-6, weight ? &w : nullptr);
    const int64_t b = r / S, s = r % S;
    for (int64_t i = 0; i < D; ++i) {
      const int64_t m = l.base + b * l.bs + s * l.ts + i;
      ref.push_back(y[i] * (1 + sc.get(m)) + sh.get(m));
    }
  }
  compare(what, out, ref, {&x, &sc, &sh, &w});
}

// `a` equals `b` bit for bit (both outputs of the same dtype and size).
static void compare_exact(const std::string& what, const Buf& a, const Buf& b) {
  ++checks;
  const bool same = a.bytes() == b.bytes() && std::memcmp(a.p, b.p, a.bytes()) == 0;
  if (!same) {
    int64_t first = 0;
    while (first < a.n && a.get(first) == b.get(first)) ++first;
    ++failures;
    std::printf("FAIL %s: differs from the unfused ops, first at [%lld]: %.9g vs %.9g [%s]\n",
                what.c_str(), static_cast<long long>(first), a.get(first), b.get(first),
                launched().c_str());
  }
}

// add_rms_norm_modulate with scale/shift in layout `mode` and the gate in layout `gate_mode` (-1: no
// gate). h against x + y (* gate) in float64, out against rms_norm_modulate of the h the kernel
// wrote (the op normalises the rounded h), and, when both take the same path (x aligned), both bit
// for bit against gated_residual (a gate of ones for none: fmaf(y, 1, x) rounds x + y once) followed
// by rms_norm_modulate.
static void check_add_modulate(DType dt, int64_t B, int64_t S, int64_t D, int mode, int gate_mode,
                               bool weight, int off = 0) {
  const int64_t rows = B * S;
  const Layout l = mod_layout(mode, B, S, D);
  const Layout gl = mod_layout(gate_mode < 0 ? 4 : gate_mode, B, S, D);
  Buf x(dt, rows * D, off), y(dt, rows * D), sc(dt, l.n), sh(dt, l.n), g(dt, gl.n), w(dt, D);
  Buf h(dt, rows * D), out(dt, rows * D);
  x.randn();
  y.randn();
  sc.randn(0.5f);
  sh.randn();
  g.randn();
  w.randn();
  h.poison();
  out.poison();
  const std::string what = "add_rms_norm_modulate " + std::string(dname(dt)) + " B=" + to_string(B) +
                           " S=" + to_string(S) + " D=" + to_string(D) + " layout=" + to_string(mode) +
                           " gate=" + (gate_mode < 0 ? std::string("none") : to_string(gate_mode)) +
                           (weight ? " weight" : "") + " off=" + to_string(off);
  begin(what);
  const void* gp = gate_mode < 0 ? nullptr : g.at(gl.base);
  add_rms_norm_modulate(h.p, out.p, x.p, y.p, sc.at(l.base), sh.at(l.base), gp, weight ? w.p : nullptr,
                        rows, S, D, l.bs, l.ts, gl.bs, gl.ts, 1e-6f, dt, nullptr);
  std::vector<double> ref_h, ref_out;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / S, s = r % S;
    for (int64_t i = 0; i < D; ++i) {
      const double gv = gate_mode < 0 ? 1.0 : g.get(gl.base + b * gl.bs + s * gl.ts + i);
      ref_h.push_back(x.get(r * D + i) + y.get(r * D + i) * gv);
    }
    auto n = ref_norm_row(h, r, D, 1e-6, weight ? &w : nullptr);
    for (int64_t i = 0; i < D; ++i) {
      const int64_t m = l.base + b * l.bs + s * l.ts + i;
      ref_out.push_back(n[i] * (1 + sc.get(m)) + sh.get(m));
    }
  }
  compare(what + " h", h, ref_h, {&x, &y, &sc, &sh, &g, &w});
  compare(what + " out", out, ref_out);
  if (off != 0 || rows == 0 || D == 0) return;

  Buf ones(dt, D), h2(dt, rows * D), out2(dt, rows * D);
  for (int64_t i = 0; i < D; ++i) ones.set(i, 1.0f);
  h2.poison();
  out2.poison();
  if (gate_mode < 0)
    gated_residual(h2.p, x.p, y.p, ones.p, rows, S, D, 0, 0, dt, nullptr);
  else
    gated_residual(h2.p, x.p, y.p, gp, rows, S, D, gl.bs, gl.ts, dt, nullptr);
  rms_norm_modulate(out2.p, h2.p, sc.at(l.base), sh.at(l.base), weight ? w.p : nullptr, rows, S, D,
                    l.bs, l.ts, 1e-6f, dt, nullptr);
  compare_exact(what + " h", h, h2);
  compare_exact(what + " out", out, out2);
}

static void check_gated(DType dt, int64_t B, int64_t S, int64_t D, int mode, int off = 0) {
  const int64_t rows = B * S;
  const Layout l = mod_layout(mode, B, S, D);
  Buf x(dt, rows * D, off), y(dt, rows * D), g(dt, l.n), out(dt, rows * D);
  x.randn();
  y.randn();
  g.randn();
  out.poison();
  const std::string what = "gated_residual " + std::string(dname(dt)) + " B=" + to_string(B) +
                           " S=" + to_string(S) + " D=" + to_string(D) + " layout=" + to_string(mode) +
                           " off=" + to_string(off);
  begin(what);
  gated_residual(out.p, x.p, y.p, g.at(l.base), rows, S, D, l.bs, l.ts, dt, nullptr);
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / S, s = r % S;
    for (int64_t i = 0; i < D; ++i)
      ref.push_back(x.get(r * D + i) + y.get(r * D + i) * g.get(l.base + b * l.bs + s * l.ts + i));
  }
  compare(what, out, ref, {&x, &y, &g});
}

static void check_gelu(DType dt, int64_t n, int off = 0) {
  Buf x(dt, n, off), out(dt, n);
  x.randn(3.0f);
  if (n > 5) {
    x.set(0, -INFINITY);
    x.set(1, INFINITY);
    x.set(2, NAN);
    x.set(3, -30.f);
    x.set(4, -3.f);
    x.keep();
  }
  out.poison();
  const std::string what = "gelu_tanh " + std::string(dname(dt)) + " n=" + to_string(n) + " off=" + to_string(off);
  begin(what);
  gelu_tanh(out.p, x.p, n, dt, nullptr);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x.get(i);
    // At -inf the formula is -inf * 0; gelu's limit there (and torch's for finite x < -11) is -0.
    ref[i] = v == -INFINITY ? -0.0 : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  compare(what, out, ref, {&x});
}

static void check_rope(DType dt, int64_t rows, int64_t dim, int off = 0) {
  Buf q(dt, rows * dim, off), k(dt, rows * dim), qo(dt, rows * dim), ko(dt, rows * dim);
  Buf c(DType::F32, rows * dim), s(DType::F32, rows * dim);
  q.randn();
  k.randn();
  c.randn();
  s.randn();
  qo.poison();
  ko.poison();
  const std::string tag =
      std::string(dname(dt)) + " rows=" + to_string(rows) + " dim=" + to_string(dim) + " off=" + to_string(off);
  begin(std::string("rope_interleaved_qk ") + tag);
  rope_interleaved_qk(qo.p, ko.p, q.p, k.p, c.f32(), s.f32(), rows, dim, dt, nullptr);
  std::vector<double> rq(rows * dim), rk(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) {
    rq[i] = q.get(i);
    rk[i] = k.get(i);
  }
  ref_rope(rq, c.f32(), s.f32());
  ref_rope(rk, c.f32(), s.f32());
  compare("rope_interleaved_qk q " + tag, qo, rq, {&q, &k, &c, &s});
  compare("rope_interleaved_qk k " + tag, ko, rk);
}

// The attention prologue's reference rows: rope(rms_norm(x, w)) for q and k, with row r's cos/sin
// from tables(r, cos, sin).
template <class Tables>
static void ref_qk(const Buf& q, const Buf& k, const Buf& wq, const Buf& wk, int64_t rows, int64_t dim,
                   Tables tables, std::vector<double>& rq, std::vector<double>& rk) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *c, *s;
    tables(r, c, s);
    auto a = ref_norm_row(q, r, dim, 1e-5, &wq);
    ref_rope(a, c, s);
    rq.insert(rq.end(), a.begin(), a.end());
    auto b = ref_norm_row(k, r, dim, 1e-5, &wk);
    ref_rope(b, c, s);
    rk.insert(rk.end(), b.begin(), b.end());
  }
}

static void check_qk(DType dt, int64_t rows, int64_t dim, int off = 0) {
  Buf q(dt, rows * dim, off), k(dt, rows * dim), wq(dt, dim), wk(dt, dim), qo(dt, rows * dim),
      ko(dt, rows * dim);
  Buf c(DType::F32, rows * dim), s(DType::F32, rows * dim);
  q.randn();
  k.randn(2.0f);
  wq.randn();
  wk.randn();
  c.randn();
  s.randn();
  qo.poison();
  ko.poison();
  const std::string tag =
      std::string(dname(dt)) + " rows=" + to_string(rows) + " dim=" + to_string(dim) + " off=" + to_string(off);
  begin(std::string("qk_rms_norm_rope ") + tag);
  qk_rms_norm_rope(qo.p, ko.p, q.p, k.p, wq.p, wk.p, c.f32(), s.f32(), rows, dim, 1e-5f, dt, nullptr);
  std::vector<double> rq, rk;
  ref_qk(q, k, wq, wk, rows, dim, [&](int64_t r, const float*& cr, const float*& sr) {
    cr = c.f32() + r * dim;
    sr = s.f32() + r * dim;
  }, rq, rk);
  compare("qk_rms_norm_rope q " + tag, qo, rq, {&q, &k, &wq, &wk, &c, &s});
  compare("qk_rms_norm_rope k " + tag, ko, rk);
}

// qk_rms_norm_rope_grid: positions in [-1, 2) and diffusers' frequencies; the reference rounds the
// angles in fp32 as the kernel (and diffusers) do, then takes cos/sin in float64.
static void check_qk_grid(DType dt, int64_t rows, int64_t dim, int off = 0) {
  const int64_t nf = dim / 6, pad = dim % 6;
  Buf q(dt, rows * dim, off), k(dt, rows * dim), wq(dt, dim), wk(dt, dim), qo(dt, rows * dim),
      ko(dt, rows * dim), pos(DType::F32, rows * 3), freqs(DType::F32, nf);
  q.randn();
  k.randn(2.0f);
  wq.randn();
  wk.randn();
  std::uniform_real_distribution<float> u(-1.0f, 2.0f);
  for (int64_t i = 0; i < rows * 3; ++i) pos.f32()[i] = u(rng);
  for (int64_t f = 0; f < nf; ++f)
    freqs.f32()[f] = static_cast<float>(std::pow(10000.0, nf > 1 ? double(f) / (nf - 1) : 0.0) * M_PI / 2);
  pos.keep();
  freqs.keep();
  qo.poison();
  ko.poison();
  const std::string tag =
      std::string(dname(dt)) + " rows=" + to_string(rows) + " dim=" + to_string(dim) + " off=" + to_string(off);
  begin(std::string("qk_rms_norm_rope_grid ") + tag);
  qk_rms_norm_rope_grid(qo.p, ko.p, q.p, k.p, wq.p, wk.p, pos.f32(), freqs.f32(), rows, dim, 1e-5f, dt,
                        nullptr);
  std::vector<double> rq, rk;
  std::vector<float> c(dim), s(dim);
  ref_qk(q, k, wq, wk, rows, dim, [&](int64_t r, const float*& cr, const float*& sr) {
    for (int64_t i = 0; i < dim; i += 2) {
      double cv = 1.0, sv = 0.0;
      if (i >= pad) {
        const int64_t m = (i - pad) / 2;
        const float signed_pos = pos.f32()[r * 3 + m % 3] * 2.0f - 1.0f;
        const float angle = freqs.f32()[m / 3] * signed_pos;
        cv = std::cos(double(angle));
        sv = std::sin(double(angle));
      }
      c[i] = c[i + 1] = static_cast<float>(cv);
      s[i] = s[i + 1] = static_cast<float>(sv);
    }
    cr = c.data();
    sr = s.data();
  }, rq, rk);
  compare("qk_rms_norm_rope_grid q " + tag, qo, rq, {&q, &k, &wq, &wk, &pos, &freqs});
  compare("qk_rms_norm_rope_grid k " + tag, ko, rk);
}

// ---- suites -----------------------------------------------------------------------------------

static const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};

// Row widths, in 16-byte vectors, on both sides of every launch-shape boundary of row_norm.cuh
// (1 vector; 32, 64, 128, 256, 512, 1024, 2048 vectors per row), so each shape the launcher can
// pick runs, at its smallest and its largest width.
static const int64_t kRowVecs[] = {1, 31, 32, 33, 64, 65, 128, 129, 200, 256, 257, 512, 513, 1024, 1025, 2048, 2049};

static void suite_rms() {
  for (DType dt : kDtypes) {
    for (int64_t v : kRowVecs)
      for (bool w : {false, true}) check_rms(dt, v == 256 ? 9 : 5, v * pack(dt), w);
    // The narrow path: widths that are no multiple of a vector, or rows that are not aligned.
    for (int64_t dim : {1, 7, 17, 127, 1000 + 3, 1025, 2050, 20001})
      for (bool w : {false, true}) check_rms(dt, 3, dim, w);
    for (bool w : {false, true}) {
      check_rms(dt, 3, 2048, w, 1);
      check_rms(dt, 2, 8 * 1024, w, 1);
    }
  }
  // LTX-Video's width over enough rows for many blocks, the last one half full.
  check_rms(DType::BF16, 203, 2048, false);
}

static void suite_mod() {
  for (DType dt : kDtypes) {
    for (int64_t v : {1, 33, 65, 129, 256, 257, 513, 1025, 2049})
      for (int mode = 0; mode < 5; ++mode)
        for (bool w : {false, true}) check_modulate(dt, 2, 3, v * pack(dt), mode, w);
    for (int mode = 0; mode < 5; ++mode)  // the narrow path: D no multiple of a vector
      for (bool w : {false, true}) check_modulate(dt, 2, 3, 100 * pack(dt) + 1, mode, w);
    check_modulate(dt, 2, 3, 2048, 1, false, 1);
    check_modulate(dt, 1, 7, 2050, 0, true);
    check_modulate(dt, 2, 3, 3 * 1024 + 1, 0, false);
  }
  check_modulate(DType::BF16, 2, 101, 2048, 0, false);  // LTX-Video: [B,1,D] scale/shift
  check_modulate(DType::BF16, 2, 101, 2048, 2, true);   // ada.unbind views
  check_modulate(DType::BF16, 1, 7, 2048, 3, false);    // the packed kernel: odd rows, ada.unbind view
}

// Every (gate, weight) instantiation at every launch shape (the widths of suite_mod), with the
// scale/shift and gate layouts taking turns.
static void suite_addmod() {
  int turn = 0;
  for (DType dt : kDtypes) {
    for (int64_t v : {1, 33, 65, 129, 256, 257, 513, 1025, 2049})
      for (int gate : {-1, 1, 3})
        for (bool w : {false, true}) {
          ++turn;
          check_add_modulate(dt, 2, 3, v * pack(dt), turn % 5, gate, w);
        }
    for (int64_t D : {int64_t(100) * pack(dt) + 1, int64_t(2050)})  // narrow: 32 and 256 threads
      for (int gate : {-1, 2, 4})
        for (bool w : {false, true}) check_add_modulate(dt, 2, 3, D, ++turn % 5, gate, w);
    check_add_modulate(dt, 2, 3, 2048, 1, 0, false, 1);  // x not 16-byte aligned: narrow path
    check_add_modulate(dt, 1, 7, 17, 0, -1, true);
  }
  check_add_modulate(DType::BF16, 2, 101, 2048, 0, -1, false);  // LTX-Video: [B,1,D] scale/shift
  check_add_modulate(DType::BF16, 2, 101, 2048, 2, 3, true);    // ada.unbind views, gate included
}

static void suite_gated() {
  for (DType dt : kDtypes)
    for (int64_t D : {1, 8, 16, 17, 100, 2048, 2050, 4096})
      for (int mode = 0; mode < 5; ++mode) check_gated(dt, 2, 3, D, mode, D == 2048 && mode == 2 ? 1 : 0);
  check_gated(DType::BF16, 2, 300, 64, 0);  // short rows: several rows per block
}

static void suite_gelu() {
  for (DType dt : kDtypes)
    for (int64_t n : {1, 3, 7, 8, 9, 100, 1031, 5000, 9000})
      for (int off : {0, 1}) check_gelu(dt, n, off);
  check_gelu(DType::BF16, 8 * 256 * 4 * 3 + 5);  // three full blocks and a tail
}

static void suite_rope() {
  for (DType dt : kDtypes)
    for (int64_t dim : {2, 6, 16, 18, 128, 2046, 2048})
      for (int64_t rows : {1, 3})
        for (int off : {0, 1}) check_rope(dt, rows, dim, off);
}

static void suite_qk() {
  for (DType dt : kDtypes) {
    for (int64_t v : kRowVecs) check_qk(dt, v == 128 ? 5 : 3, v * pack(dt));
    for (int64_t dim : {2, 6, 18, 2046, 2054, 6000 + 2}) check_qk(dt, 3, dim);
    check_qk(dt, 3, 2048, 1);
    check_qk(dt, 2, 4096, 1);
  }
  check_qk(DType::BF16, 67, 2048);  // LTX-Video: 2048 wide, many blocks
}

static void suite_qkgrid() {
  for (DType dt : kDtypes) {
    for (int64_t v : kRowVecs) check_qk_grid(dt, v == 128 ? 5 : 3, v * pack(dt));
    for (int64_t dim : {2, 6, 14, 18, 2046, 2054, 6000 + 2}) check_qk_grid(dt, 3, dim);
    check_qk_grid(dt, 3, 2048, 1);
    check_qk_grid(dt, 2, 4096, 1);
  }
  check_qk_grid(DType::BF16, 67, 2048);  // LTX-Video: 2048 wide, many blocks
}

// Empty tensors (no rows, zero width): no launch at all, as a zero-size grid is a launch error.
static void suite_empty() {
  for (DType dt : kDtypes) {
    for (int64_t rows : {0, 3}) {
      const int64_t dim = rows ? 0 : 2048;
      check_rms(dt, rows, dim, true);
      check_modulate(dt, rows ? 1 : 0, rows, dim, 0, false);
      check_gated(dt, rows ? 1 : 0, rows, dim, 0);
      check_add_modulate(dt, rows ? 1 : 0, rows, dim, 0, -1, false);
      check_add_modulate(dt, rows ? 1 : 0, rows, dim, 0, 0, true);
      check_rope(dt, rows, dim);
      check_qk(dt, rows, dim);
      check_qk_grid(dt, rows, dim);
    }
    check_gelu(dt, 0);
  }
}

// ---- fault self-tests: each must end in the report named in harness.py -------------------------

namespace selftest {
__global__ void misaligned_load(const __nv_bfloat16* p, float* out) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(p + 1));  // 2 bytes past a 16-byte boundary
  out[threadIdx.x] = static_cast<float>(w.x);
}
__global__ void write_past_end(float* out, int n) { out[n - 1 + threadIdx.x] = 0.0f; }
__global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncwarp();
  out[threadIdx.x] = 1.0f;
}
// Reverses a row through shared memory but forgets the __syncthreads between writing and reading.
__global__ void missing_syncthreads(float* out, const float* in) {
  __shared__ float row[64];
  row[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
  out[blockIdx.x * 64 + threadIdx.x] = row[63 - threadIdx.x];
}
}  // namespace selftest

static void fault(const std::string& name) {
  Buf a(DType::BF16, 128), b(DType::F32, 128), c(DType::F32, 128);
  if (name == "fault-misaligned") {
    emu::launch<&selftest::misaligned_load>(emu::Config(1, 32), static_cast<const __nv_bfloat16*>(a.p), b.f32());
  } else if (name == "fault-overflow") {
    emu::launch<&selftest::write_past_end>(emu::Config(1, 32), b.f32(), 128);
  } else if (name == "fault-deadlock") {
    emu::launch<&selftest::divergent_barrier>(emu::Config(1, 32), b.f32());
  } else if (name == "fault-race") {
    c.randn();
    b.poison();
    begin("missing __syncthreads");
    emu::launch<&selftest::missing_syncthreads>(emu::Config(2, 64), b.f32(), static_cast<const float*>(c.f32()));
    std::vector<double> ref(128);
    for (int i = 0; i < 128; ++i) ref[i] = c.get(i / 64 * 64 + 63 - i % 64);
    compare("missing __syncthreads", b, ref);
  } else {
    std::fprintf(stderr, "unknown self-test %s\n", name.c_str());
    std::exit(2);
  }
}

int main(int argc, char** argv) {
  const std::map<std::string, void (*)()> suites = {
      {"rms", suite_rms},   {"mod", suite_mod}, {"addmod", suite_addmod}, {"gated", suite_gated},
      {"gelu", suite_gelu}, {"rope", suite_rope}, {"qk", suite_qk},       {"qkgrid", suite_qkgrid},
      {"empty", suite_empty},
  };
  std::vector<std::string> run(argv + 1, argv + argc);
  if (run.empty()) run = {"rms", "mod", "addmod", "gated", "gelu", "rope", "qk", "qkgrid", "empty"};
  for (const auto& name : run) {
    if (name.rfind("fault-", 0) == 0) {
      fault(name);
      continue;
    }
    const auto it = suites.find(name);
    if (it == suites.end()) {
      std::fprintf(stderr, "unknown suite %s\n", name.c_str());
      return 2;
    }
    const int before = checks;
    it->second();
    std::printf("SUITE %s %d\n", name.c_str(), checks - before);
  }
  for (const auto* k : emu::registry())
    if (k->name.rfind("selftest::", 0) != 0) std::printf("KERNEL %lld %s\n", k->launches, k->name.c_str());
  for (const auto& [dt, w] : worst) std::printf("WORST %s %.3f of the tolerance\n", dt.c_str(), w);
  long long launches = 0;
  for (const auto* k : emu::registry()) launches += k->launches;
  std::printf("RESULT checks=%d failed=%d launches=%lld\n", checks, failures, launches);
  return failures != 0;
}
