// A tracee whose libraries come and go: it dlopens and dlcloses libraries on command, and
// checks every result of the probed function against what that library should return.
//   open PATH   dlopen(PATH)                      -> "opened 0xADDR" (probecost_dl_site)
//   call N      call probecost_dl_site N times    -> "calls=TOTAL wrong=W" (W results differ)
//   close       dlclose the library               -> "closed"
//   exit        exit 0                            -> "bye"
// Commands come from the arguments, else from stdin, one per line. Prints "ready PID" first.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Site = int (*)(int);
void* g_lib = nullptr;
Site g_site = nullptr, g_expected = nullptr;
std::uint64_t g_calls = 0, g_wrong = 0;

void reply(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

bool run(const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg;
  in >> cmd >> arg;
  if (cmd == "open") {
    g_lib = ::dlopen(arg.c_str(), RTLD_NOW);
    if (!g_lib) {
      reply(std::string("error ") + ::dlerror());
      return true;
    }
    g_site = reinterpret_cast<Site>(::dlsym(g_lib, "probecost_dl_site"));
    g_expected = reinterpret_cast<Site>(::dlsym(g_lib, "probecost_dl_expected"));
    char buf[64];
    std::snprintf(buf, sizeof buf, "opened %p", reinterpret_cast<void*>(g_site));
    reply(buf);
  } else if (cmd == "call") {
    for (long i = 0, n = std::stol(arg); i < n; ++i, ++g_calls) {
      g_wrong += g_site(static_cast<int>(i)) != g_expected(static_cast<int>(i));
    }
    reply("calls=" + std::to_string(g_calls) + " wrong=" + std::to_string(g_wrong));
  } else if (cmd == "close") {
    ::dlclose(g_lib);
    g_lib = nullptr;
    reply("closed");
  } else if (cmd == "exit") {
    reply("bye");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  reply("ready " + std::to_string(::getpid()));
  if (argc > 1) {
    std::vector<std::string> cmds(argv + 1, argv + argc);
    for (const auto& c : cmds) {
      if (!run(c)) break;
    }
    return 0;
  }
  for (std::string line; std::getline(std::cin, line);) {
    if (!run(line)) break;
  }
  return 0;
}
