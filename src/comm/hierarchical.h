// Hierarchical collectives (docs/compression.md, "Hierarchical collectives"): a Communicator over
// a group whose ranks sit on several hosts, that runs the reductions and gathers within each host
// first and across hosts second, so that what crosses the slow link between hosts is one host's
// share instead of every rank's:
//   all_reduce(n):     reduce_scatter within the host (n / L each), all_reduce across hosts of
//                      that share, all_gather within the host;
//   reduce_scatter:    reduce_scatter within the host of the segments regrouped by local rank,
//                      then reduce_scatter across hosts;
//   all_gather:        all_gather across hosts among the ranks of the same local rank, then
//                      within the host, regrouped into rank order.
// L ranks per host, H hosts: across hosts each rank sends about 2 (H - 1) / (H L) of the values of
// an all-reduce instead of 2 (R - 1) / R. The other ops (broadcast, all_to_all, send, recv,
// barrier, split) run on the flat group unchanged.
//
// Layout: every host has the same number of ranks, and a host's ranks are consecutive in the
// group (rank = host x L + local rank), as mpirun places them by default; otherwise (or with one
// host, or one rank per host) make_hierarchical returns null with the reason.
//
// Sums keep a fixed order, not the flat one: element i of a reduction is the sum over hosts in
// host order of each host's sum over its ranks in rank order, ((x0 + x1) + (x2 + x3)) for two
// hosts of two; bf16/f16 round after each of the two phases. Every rank holds the same bits, and
// threads and MPI give the same bits, but not the flat communicator's bits.
//
// The phases of one op are issued by wait(), never by test() (which reports done only once wait()
// finished the last phase): where and when a phase is issued then depends only on the order the
// program waits for its ops, the same on every rank (Note [Finish order] in
// parallel/zero_grad_buckets.cpp). Do not busy-wait on test() of a hierarchical reduction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

// This process's host as the hierarchy sees it: the environment variable ZT_HOST when set (for
// machines whose processes should group differently, and for tests), else the host name and the
// network namespace (ranks in different network namespaces reach each other over a network).
std::string host_key();

// Ranks per host when `hosts` (one entry per rank of a group) forms the layout above; 0 and the
// reason otherwise.
int ranks_per_host(const std::vector<std::string>& hosts, std::string* why);

// A hierarchical communicator over `flat` (which must outlive it), or null (with *why) where the
// layout does not allow one. hosts: every rank's host_key(), in rank order. Collective over flat
// (it splits the groups within and across hosts).
std::unique_ptr<Communicator> make_hierarchical(Communicator& flat,
                                                const std::vector<std::string>& hosts,
                                                std::string* why);

// The communication across hosts of a hierarchical communicator (its cross-host group's stats),
// or null when c is not one.
const Communicator* cross_host_group(const Communicator& c);

}  // namespace zt
