#pragma once
// The seeds' own figures (../shared/seeds/ of the project's history), as tables to print
// beside today's: the measurements this project grew from.
#include <vector>

#include "experiment/experiment.hpp"

namespace probecost::seeds {

// 000: Linux Kernel Markers 0.19, disabled and enabled, Pentium 4 3 GHz (2007).
std::vector<Table> markers_000();
// 002: a NOP site with its argument set-up against load-immediate + branch, Pentium 4 (2007).
Table nop_site_002();
// 001: kprobes RCU scalability, ns per hit as 1..15 CPUs hit one probe, IA-64 (2006).
Table scalability_001();
// 003: multi-kprobe timing, one handler against several on one address, PIII 732 MHz (2005).
Table multi_probe_003();
// 004: int3 with an empty user-space handler against an LTT event, Pentium 4 3 GHz (2006).
Table int3_004();

// The 2006 figures of seed 004, for the charts.
inline constexpr double kInt3_2006_ns = 2010;
inline constexpr double kLtt2006_ns = 220;
inline constexpr double kRate2006 = 749'994;

}  // namespace probecost::seeds
