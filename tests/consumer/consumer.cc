// Uses only <tilerun/tilerun.h>: loads a model, initialises its tensors, writes and reads them
// back through .safetensors, checks the round trip is exact, and runs a checked step.
#include <tilerun/tilerun.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer MODEL.yaml OUT.safetensors\n");
    return 2;
  }
  try {
    tilerun::Model model = tilerun::load_model(argv[1]);
    tilerun::TensorMap tensors = tilerun::initialize_tensors(model, 7);
    tilerun::write_safetensors(argv[2], tensors);
    tilerun::TensorMap back = tilerun::read_safetensors(argv[2]);
    if (back.size() != tensors.size()) return 1;
    for (const auto& [name, t] : tensors) {
      const tilerun::HostTensor& b = back.at(name);
      if (b.dtype != t.dtype || b.shape != t.shape || b.data != t.data) {
        std::fprintf(stderr, "round trip changed %s\n", name.c_str());
        return 1;
      }
    }
    // A step on the CPU backend through the Session, checked against the reference.
    tilerun::Session session(model, {.device = tilerun::Device::Cpu, .seed = 7});
    session.set_tensors(back);
    session.forward();
    session.backward();
    tilerun::CheckResult check = session.check();
    if (!check.ok || session.gradients().size() != 7) {
      std::fprintf(stderr, "step failed its check: %s %g\n", check.worst_tensor.c_str(),
                   check.worst_error);
      return 1;
    }
    std::printf("tilerun %s: %s, %zu tensors, %lld parameters, %zu layer timings, check ok\n",
                tilerun::version(), model.name.c_str(), tensors.size(),
                (long long)model.parameter_count(), session.timings().size());
    return 0;
  } catch (const tilerun::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  }
}
