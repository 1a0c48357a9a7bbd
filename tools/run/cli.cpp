#include "run/cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cli_app.hpp"
#include "common/cli_parse.hpp"
#include "common/progress.hpp"
#include "run/gguf.hpp"
#include "run/model.hpp"
#if defined(KVFLASH_RUN_CUDA)
#include "run/device_forward.hpp"
#endif

namespace kvflash::tools::run {
namespace {

struct Args {
  std::string model, prompt, prompt_file, tokens, ctk = "f16", ctv, context, threads = "0";
  std::string n_predict = "32", chunk = "512", logits, backend = "cpu", graphs = "on";
  std::string prompts_file;
  bool no_progress = false;
};

// Whether the model's tokens are bytes (the project's own models: tokenizer.ggml.model "bytes"
// and 256 or more tokens), so that -p text can be fed as its UTF-8 bytes.
bool byte_tokens(const GgufFile& f, const LlamaConfig& c) {
  const GgufValue* t = f.find("tokenizer.ggml.model");
  return t != nullptr && t->type == GgufValueType::string && t->s == "bytes" && c.n_vocab >= 256;
}

std::string show_token(int32_t id, bool bytes) {
  if (!bytes) return fmt::format("{} ", id);
  if (id >= 32 && id < 127) return std::string(1, static_cast<char>(id));
  if (id == '\n') return "\n";
  return fmt::format("<0x{:02x}>", id);
}

int argmax(const float* x, int32_t n) {
  return static_cast<int>(std::max_element(x, x + n) - x);
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "kvflash-run: a Llama-architecture GGUF model with kvflash attention over a compressed KV "
      "cache: prefill a prompt, generate greedily, report tokens/s",
      "kvflash-run"};
  Args a;
  app.add_option("-m,--model", a.model, "GGUF model file (llama architecture)")
      ->required()
      ->type_name("FILE");
  app.add_option("-p,--prompt", a.prompt,
                 "prompt text, fed as bytes (models whose tokens are bytes, such as the project's "
                 "own; tokenizer.ggml.model = \"bytes\")")
      ->type_name("TEXT");
  app.add_option("-f,--file", a.prompt_file,
                 "prompt text read from FILE, as -p (long prompts: one argument holds at most "
                 "128 KiB)")
      ->type_name("FILE");
  app.add_option("--prompts", a.prompts_file,
                 "several prompts from FILE, separated by NUL bytes, each on a fresh cache (-n "
                 "tokens generated for each; the generations on stdout, each ended by a NUL byte; "
                 "tokens/s over all of them)")
      ->type_name("FILE");
  app.add_option("--tokens", a.tokens, "prompt as token ids, comma-separated (any model)")
      ->type_name("IDS");
  app.add_option("-n,--n-predict", a.n_predict, "tokens to generate (greedy)")->type_name("N");
  app.add_option("--ctk,--cache-type-k", a.ctk,
                 "-ctk: K cache type, or one per layer comma-separated (default f16)")
      ->type_name("TYPE");
  app.add_option("--ctv,--cache-type-v", a.ctv, "-ctv: V cache type(s) (default: as -ctk)")
      ->type_name("TYPE");
  app.add_option("-c,--ctx-size", a.context,
                 "KV cache capacity in tokens (default: prompt + generated)")
      ->type_name("N");
  app.add_option("-b,--batch-size", a.chunk, "prompt tokens per prefill call (default 512)")
      ->type_name("N");
  app.add_option("-t,--threads", a.threads, "CPU threads for attention (default: all)")
      ->type_name("N");
  app.add_option("--logits", a.logits,
                 "write the logits of every prompt token to FILE (f32, prompt tokens x vocab, "
                 "little-endian): for cross-checks and KL divergence")
      ->type_name("FILE");
  app.add_option("--backend", a.backend,
                 "where the forward pass runs: cpu (BLAS, the CPU attention kernels), or cuda "
                 "(device 0: cuBLAS, the K/V in a gpu::KvCache, the CUDA attention kernels)");
  app.add_option("--graphs", a.graphs,
                 "--backend cuda: decode steps as one CUDA graph, captured at the third step and "
                 "replayed (on), or launched eagerly (off)")
      ->type_name("on|off");
  app.add_flag("--no-progress", a.no_progress, "no progress line on stderr");
  try {
    parse_llama_style(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : kExitUsage;
  }
  const auto usage = [&](const std::string& msg) {
    err << "kvflash-run: " << msg << "\n";
    return kExitUsage;
  };
  const auto failed = [&](const std::string& msg) {
    err << "kvflash-run: " << msg << "\n";
    return kExitFailed;
  };

  Expected<int64_t> n_predict = parse_int("-n", a.n_predict, 0, 1 << 24);
  if (!n_predict) return usage(n_predict.error().message);
  Expected<int64_t> chunk = parse_int("-b", a.chunk, 1, 1 << 20);
  if (!chunk) return usage(chunk.error().message);
  Expected<int64_t> threads = parse_int("-t", a.threads, 0, 4096);
  if (!threads) return usage(threads.error().message);
  const std::optional<Backend> backend = backend_from_name(a.backend);
  if (!backend) return usage(fmt::format("--backend '{}': expected cpu or cuda", a.backend));
  if (a.graphs != "on" && a.graphs != "off")
    return usage(fmt::format("--graphs '{}': expected on or off", a.graphs));
  Expected<std::vector<KvType>> ctk = parse_types("-ctk", a.ctk);
  if (!ctk) return usage(ctk.error().message);
  Expected<std::vector<KvType>> ctv = parse_types("-ctv", a.ctv.empty() ? a.ctk : a.ctv);
  if (!ctv) return usage(ctv.error().message);

  Expected<GgufFile> file = open_gguf(a.model);
  if (!file) return failed(file.error().message);
  const auto t_load = std::chrono::steady_clock::now();
  Expected<LlamaModel> model = load_llama(*file);
  if (!model) return failed(model.error().message);
  const LlamaConfig& c = model->config;
  const bool bytes = byte_tokens(*file, c);

  // The prompts: one (-p, -f, --tokens), or several (--prompts), each run on a fresh cache.
  std::vector<std::vector<int32_t>> prompts;
  if (int(!a.prompt.empty()) + int(!a.prompt_file.empty()) + int(!a.tokens.empty()) +
          int(!a.prompts_file.empty()) >
      1)
    return usage("give one of -p, -f, --tokens and --prompts");
  std::vector<std::string> texts;
  const auto read_file = [](const std::string& path, std::string& into) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    into.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return true;
  };
  if (!a.prompt_file.empty()) {
    if (!read_file(a.prompt_file, a.prompt))
      return failed(fmt::format("-f: cannot read '{}'", a.prompt_file));
    if (a.prompt.empty()) return usage(fmt::format("-f: '{}' is empty", a.prompt_file));
  }
  if (!a.prompt.empty()) texts.push_back(a.prompt);
  if (!a.prompts_file.empty()) {
    std::string all;
    if (!read_file(a.prompts_file, all))
      return failed(fmt::format("--prompts: cannot read '{}'", a.prompts_file));
    for (const std::string& t : split(all, '\0'))
      if (!t.empty()) texts.push_back(t);
    if (texts.empty()) return usage(fmt::format("--prompts: '{}' holds no prompt", a.prompts_file));
    if (!a.logits.empty()) return usage("--logits takes one prompt, not --prompts");
  }
  if (!texts.empty()) {
    if (!bytes) {
      const GgufValue* t = file->find("tokenizer.ggml.model");
      return usage(fmt::format(
          "this model's tokenizer ('{}') is not one kvflash-run implements (it feeds bytes to "
          "byte-token models only): give the prompt as token ids with --tokens",
          t != nullptr && t->type == GgufValueType::string ? t->s : "none"));
    }
    for (const std::string& t : texts) prompts.emplace_back(t.begin(), t.end());
    for (std::vector<int32_t>& p : prompts)
      for (int32_t& id : p) id = static_cast<unsigned char>(id);
  } else if (!a.tokens.empty()) {
    // Token ids: plain non-negative integers (0 included; no ranges or K suffixes, unlike the
    // other tools' lists).
    std::vector<int32_t> prompt;
    for (const std::string& item : split(a.tokens, ',')) {
      Expected<int64_t> id = parse_int("--tokens", item, 0, c.n_vocab - 1);
      if (!id)
        return usage(fmt::format("{} (token ids of this model: 0 .. {})", id.error().message,
                                 c.n_vocab - 1));
      prompt.push_back(static_cast<int32_t>(*id));
    }
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty())
    return usage("no prompt: give -p TEXT, -f FILE, --tokens IDS or --prompts FILE");

  size_t longest = 0;
  for (const std::vector<int32_t>& p : prompts) longest = std::max(longest, p.size());
  int64_t capacity = static_cast<int64_t>(longest) + *n_predict;
  if (!a.context.empty()) {
    Expected<int64_t> ctx = parse_int("-c", a.context, 1, int64_t{1} << 32);
    if (!ctx) return usage(ctx.error().message);
    if (*ctx < capacity)
      return usage(
          fmt::format("-c {} holds fewer tokens than the prompt and the generated ones "
                      "({})",
                      *ctx, capacity));
    capacity = *ctx;
  }
  Expected<LlamaSession> session = LlamaSession::create(
      *model, *ctk, *ctv, capacity, static_cast<int32_t>(*threads), *backend, a.graphs == "on");
  if (!session)
    return session.error().code == ErrorCode::invalid_argument ? usage(session.error().message)
                                                               : failed(session.error().message);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  err << fmt::format(
      "kvflash-run: {} layers, {} heads / {} KV heads of {}, vocab {}, loaded in {:.2f} s; KV "
      "cache {} / {} ({:.3f} / {:.3f} bits per value) for {} tokens on {}\n",
      c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab, load_s, to_string((*ctk)[0]),
      to_string((*ctv)[0]), 8.0 * bytes_per_value((*ctk)[0], c.head_dim),
      8.0 * bytes_per_value((*ctv)[0], c.head_dim), capacity, to_string(*backend));

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> dump(nullptr, std::fclose);
  if (!a.logits.empty()) {
    dump.reset(std::fopen(a.logits.c_str(), "wb"));
    if (dump == nullptr) return failed(fmt::format("cannot write '{}'", a.logits));
  }
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  int64_t prefilled = 0, decoded = 0;
  double prefill_s = 0.0, decode_s = 0.0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i];
    if (i > 0)
      if (Status st = session->reset(); !st) return failed(st.message());
    // Prefill in chunks, with a progress line on long prompts.
    std::vector<float> last;
    const auto t0 = std::chrono::steady_clock::now();
    const auto n_chunks =
        static_cast<int64_t>((prompt.size() + size_t(*chunk) - 1) / size_t(*chunk));
    Progress progress(n_chunks, !a.no_progress);
    for (size_t at = 0; at < prompt.size(); at += static_cast<size_t>(*chunk)) {
      const size_t end = std::min(prompt.size(), at + static_cast<size_t>(*chunk));
      Expected<std::vector<float>> l = session->forward(
          std::vector<int32_t>(prompt.begin() + int64_t(at), prompt.begin() + int64_t(end)),
          dump != nullptr);
      if (!l) return failed(l.error().message);
      if (dump != nullptr) {
        std::fwrite(l->data(), sizeof(float), l->size(), dump.get());
        last.assign(l->end() - c.n_vocab, l->end());
      } else {
        last = std::move(*l);
      }
      progress.step(fmt::format("prefill {} / {} tokens", end, prompt.size()));
    }
    progress.finish();
    prefill_s += seconds_since(t0);
    prefilled += static_cast<int64_t>(prompt.size());

    // Greedy decode.
    std::string shown;
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < *n_predict; ++k) {
      const int32_t next = argmax(last.data(), c.n_vocab);
      shown += show_token(next, bytes);
      if (k + 1 == *n_predict) break;
      Expected<std::vector<float>> l = session->forward({next}, false);
      if (!l) return failed(l.error().message);
      last = std::move(*l);
    }
    decode_s += seconds_since(t1);
    decoded += std::max<int64_t>(*n_predict - 1, 0);
    // One generation per line; after --prompts each ends in a NUL byte instead (a generation
    // may hold newlines).
    out << shown << (a.prompts_file.empty() ? '\n' : '\0');
    out.flush();
  }
  err << fmt::format("prefill: {} tokens in {:.1f} ms ({:.1f} tokens/s)\n", prefilled,
                     prefill_s * 1e3, static_cast<double>(prefilled) / prefill_s);
  if (decoded > 0)
    err << fmt::format("decode: {} tokens in {:.1f} ms ({:.1f} tokens/s)\n", decoded,
                       decode_s * 1e3, static_cast<double>(decoded) / decode_s);
#if defined(KVFLASH_RUN_CUDA)
  if (const DeviceForward* d = session->device()) {
    const GraphCounters& g = d->graph_counters();
    err << fmt::format(
        "cuda: weights {:.1f} MB on the device; decode steps: {} eager, {} "
        "captured, {} replayed from the graph\n",
        static_cast<double>(d->weight_bytes()) / 1e6, g.eager_runs, g.captures, g.replays);
  }
#endif
  return 0;
}

}  // namespace kvflash::tools::run
