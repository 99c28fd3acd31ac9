#pragma once
// For programs built to be traced (probecost-inferior, the test tracees) in the sanitizer build:
// LeakSanitizer checks for leaks at exit by attaching to the process with ptrace, which fails
// when the process is already traced ("LeakSanitizer does not work under ptrace") and turns a
// clean exit into exit code 1. AddressSanitizer and UBSan stay on; only the leak check is off.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() {
  return "detect_leaks=0";
}
#endif
