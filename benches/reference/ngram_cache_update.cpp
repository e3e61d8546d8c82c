// The reference for `begin/ngram-cache-first-draft` in benches/strategies.rs: llama.cpp's
// common_ngram_cache_update (common/ngram-cache.{h,cpp}: the same containers, hash and loop),
// learning the bench's text stream (text_stream(len, 3)) with n-gram sizes 1..4, on this machine.
// Only the update; llama.cpp's first draft call also copies the history.
//
//   g++ -O2 -o /tmp/ngram_cache_update benches/reference/ngram_cache_update.cpp && /tmp/ngram_cache_update
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <unordered_map>
#include <vector>
typedef int32_t llama_token;
#define LLAMA_NGRAM_MAX 4
struct common_ngram {
    llama_token tokens[LLAMA_NGRAM_MAX];
    common_ngram(const llama_token * input, const int n) { for (int i = 0; i < LLAMA_NGRAM_MAX; ++i) tokens[i] = i < n ? input[i] : -1; }
    bool operator==(const common_ngram & o) const { for (int i = 0; i < LLAMA_NGRAM_MAX; ++i) if (tokens[i] != o.tokens[i]) return false; return true; }
};
struct th { size_t operator()(const llama_token t) const { return t * 11400714819323198485llu; } };
struct nh { size_t operator()(const common_ngram & g) const { size_t h = th{}(g.tokens[0]); for (int i = 1; i < LLAMA_NGRAM_MAX; ++i) h ^= th{}(g.tokens[i]); return h; } };
typedef std::unordered_map<llama_token, int32_t> part_t;
typedef std::unordered_map<common_ngram, part_t, nh> cache_t;
static void update(cache_t & c, int nmin, int nmax, std::vector<llama_token> & inp, int nnew) {
    const int64_t n = inp.size();
    for (int64_t s = nmin; s <= nmax; ++s) {
        for (int64_t i = std::max(n - nnew, s); i < n; ++i) {
            common_ngram g(&inp[i - s], s);
            const llama_token t = inp[i];
            auto it = c.find(g);
            if (it == c.end()) { part_t p; p.emplace(t, 1); c.emplace(g, p); }
            else { auto jt = it->second.find(t); if (jt == it->second.end()) it->second.emplace(t, 1); else jt->second++; }
        }
    }
}
struct Rng { uint64_t s; uint64_t next() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; } uint64_t below(uint64_t n) { return next() % n; } };
static std::vector<llama_token> text_stream(size_t len, uint64_t seed) {
    Rng r{seed | 1}; std::vector<llama_token> out;
    while (out.size() < len) {
        if (out.size() > 256 && r.below(10) == 0) {
            size_t n = 8 + r.below(64); size_t st = r.below(out.size() - n);
            for (size_t j = 0; j < n; ++j) out.push_back(out[st + j]);
        } else {
            double x = (double) r.below(1 << 20) / (double) (1ull << 20);
            out.push_back(std::min((llama_token) std::pow(5000.0, x), 4999));
        }
    }
    out.resize(len); return out;
}
int main() {
    for (size_t len : {32u << 10, 128u << 10}) {
        auto s = text_stream(len, 3);
        std::vector<double> ms;
        size_t sum = 0;
        for (int rep = 0; rep < 15; ++rep) {
            cache_t c;
            auto t0 = std::chrono::steady_clock::now();
            update(c, 1, 4, s, (int) s.size());
            auto t1 = std::chrono::steady_clock::now();
            ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            sum += c.size();
        }
        std::sort(ms.begin(), ms.end());
        printf("llama.cpp ngram-cache update, %zuk text tokens: median %.1f ms (min %.1f, max %.1f), %zu n-grams\n", len >> 10, ms[ms.size() / 2], ms[0], ms.back(), sum / 15);
    }
}
