#include "experiment/seeds.hpp"

namespace probecost::seeds {

std::vector<Table> markers_000() {
  Table disabled{
      "Seed 000 (Linux Kernel Markers 0.19, Pentium 4 3 GHz, 2007): disabled marker "
      "MARK(subsys_mark1, \"%d %p\", 1, NULL), cycles per loop",
      {"loop", "no marker", "\"optimized\": immediate + test + branch",
       "\"generic\": load + test + branch"},
      {{"empty loop", "1.50", "4.00 (+2.50)", "2.67 (+1.17)"},
       {"4 KiB memcpy loop", "1298.16", "1298.23 (+0.074)", "1300.28 (+2.123)"},
       {"bytes added, likely path", "", "6", "11"},
       {"bytes added, unlikely path", "", "32", "32"}}};
  Table enabled{"Seed 000: the \"optimized\" marker enabled, with an empty probe, cycles per loop",
                {"how the probe gets its arguments", "cycles per loop"},
                {{"registers (i386 fastcall)", "44.08 (40.08 over the disabled loop)"},
                 {"variable arguments", "52.11"},
                 {"on the stack (asmlinkage), copied by the probe", "53.00"},
                 {"variable arguments expected by the probe, copied", "55.74"},
                 {"variable arguments parsed with the format string", "96.22"}}};
  return {disabled, enabled};
}

Table nop_site_002() {
  return {
      "Seed 002 (Pentium 4 3 GHz, 2007): 20,000 calls of a function holding the marker "
      "(4 arguments), interrupts off",
      {"the function holds", "cycles per loop"},
      {{"no marker", "12.02"},
       {"marker: load immediate 0, test, branch predicted", "10.02"},
       {"NOPs in place of the call, the argument set-up left in place", "20.5"}}};
}

Table scalability_001() {
  return {
      "Seed 001 (kprobes, IA-64 Montecito, 16 logical CPUs, 2006): ns per probe hit = total "
      "time / total hits, 65,536 hits per CPU",
      {"CPUs hitting the probe", "before the RCU change (2.6.9-22.EL)", "after (2.6.9-34.13.EL)"},
      {{"1", "453", "451"},
       {"2", "632", "480"},
       {"4", "4,759", "145"},
       {"8", "17,352", "143"},
       {"15", "29,947", "95"}}};
}

Table multi_probe_003() {
  return {"Seed 003 (PIII 732 MHz, uniprocessor, Linux 2.6.12-rc2, 2005): µs per hit",
          {"probe", "vanilla", "single interface (take3)", "multiple interfaces (take4)"},
          {{"kprobe", "1.124", "1.149", "1.149"},
           {"jprobe", "1.891", "1.885", "1.885"},
           {"kprobe_multi: several probes on one address", "NA", "1.306", "1.387"}}};
}

Table int3_004() {
  return {"Seed 004 (LKML, Pentium 4 3 GHz, 2006): at 749,994 events per second",
          {"mechanism", "per hit", "CPU share"},
          {{"int3 in a loop, empty user-space handler", "2.01 µs", "150%"},
           {"LTT event (direct memory write)", "0.220 µs", "16.5%"}}};
}

}  // namespace probecost::seeds
