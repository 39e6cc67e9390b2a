@soak
Feature: Soak — at most once into workers and at least once into mains, under a nemesis (SPEC §5, §6, §12, [C-16])

  Not in the default run: `scripts/soak` runs it (FLEET_E2E_SOAK=1). While briefs and replies
  flow, a nemesis SIGKILLs and restarts gateways, freezes them (SIGSTOP/SIGCONT), cuts their link
  to the broker, closes one of their broker connections from the broker side and restarts the
  broker on its data (process and container providers; the url provider cannot, so that strike is
  off there and the summary says so). A scenario that restarts the broker has it to itself: other
  scenarios wait. A history checker then classifies every operation ok / failed / unknown and
  fails on anything lost (ok, never arrived), duplicated (a brief injected twice; a reply drained
  twice within one life of the main's gateway), unexpected (arrived, never sent) or failed but
  delivered (a `failed` answer with reason `not_connected` says the publish never left the
  gateway: its message must never arrive). Unknown operations (inject_timeout, a publish lost with
  its connection — reason `publish`, [C-16] — an MCP call that errored) may or may not arrive. The
  summary goes to `<reports>/<broker>/soak.json`, with the unknown rate over all operations with
  and without the inherent unknowns, and the definite failures per nemesis kind, tool and reason.
  Operations are spread over at least two rounds of the nemesis cycle. FLEET_SOAK_OPS=N replaces
  the operation counts below (N/4 briefs to and N/4 replies from each worker); FLEET_SOAK_NEMESIS
  (e.g. kill,pause,cut,close,restart; on a cluster also node-kill, leader-kill, partition; with
  rotate or revoke-restore as below; `default` for the default cycle) the nemesis cycle.

  With a gateway that declares `membership` (SPEC §18) the cycle may also rotate a host's key
  (rotate: a new key and a new certificate from the fleet CA, the files replaced by rename, then
  SIGHUP; MEM-3) and revoke a host's certificate in every revocation list, then issue it a new one
  with a new serial, the old revocation kept (revoke-restore; MEM-4). The hosts then run on
  certificates made by ssh-keygen, in no peers file. What a revoked host could not complete ends
  failed or unknown, never lost: a message the receiving gateway logged rejecting as `revoked`
  while the nemesis had its signer revoked counts as failed, whatever its caller saw. Neither is in
  the default cycle (`scripts/soak --membership` adds both).

  On a cluster (SPEC §16: process:rabbitmq-cluster or container:rabbitmq-cluster, with a gateway
  that declares `cluster`: every node's URL, quorum queues) the nemesis also strikes nodes, one at
  a time, each brought back and the cluster whole before the next (a quorum needs 2 of 3): it kills
  a node that holds gateway connections (node-kill) or the node leading the main's inbox
  (leader-kill) and starts it again, and, on the container provider only, cuts a node off the
  others and heals it (partition; CLU-5, CLU-6). Once per round it takes the whole site down
  (site: every gateway SIGKILLed and every node stopped together, then the broker and each gateway
  back at seeded offsets within 60 s, stretched; [C-25]: the gateways get an unknown-host hold of
  120 s, stretched alike), and `site` may be asked for anywhere in FLEET_SOAK_NEMESIS. The broker restart stops and starts every node
  together. The scenario has the cluster to itself and leaves it whole. Every gateway is given
  every node, each through a link of its own, its list rotated per host (CONTRACT §11): the cut
  strike still cuts every connection between gateways and broker at once, while a node strike
  takes one node away from the broker's side. A gateway that declares `confirm-stall` is handed a
  stall bound of 2 seconds (`FLEET_CONFIRM_STALL_MS`, stretched), as an operator of a cluster runs
  it: a node cut off from its peers confirms nothing until the cluster notices, ~49 s.

  Background:
    Given a broker the soak's nemesis may restart and strike node by node
    And the gateways' inject bound is 6 seconds
    And gateways use an AMQP heartbeat of 2 seconds
    And gateways on "a", "b" and "c" reach the broker through links the suite can cut, one per broker node
    And hosts "a", "b" and "c" run on certificates from a fleet CA when the nemesis rotates keys or revokes certificates
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And host "c" runs a gateway with a worker "w2" whose parent is "lead"
    And "w1" finishes each brief quickly
    And "w2" finishes each brief quickly

  @FWD-1 @FWD-5 @FWD-6 @RPL-1 @CON-3
  Scenario: 1000 operations across three hosts under kills, freezes, cuts, connection closes, broker restarts and node strikes
    When "lead" sends 250 briefs to each of "w1" and "w2", which reply 250 times each, while a nemesis strikes every 2500 ms
    Then after healing, the history of "lead" with "w1" and "w2" shows nothing lost, unexpected or duplicated
