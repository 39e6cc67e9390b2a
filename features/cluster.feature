@cluster @cap-cluster @broker-cluster
Feature: Cluster profile — quorum inboxes on a 3-node RabbitMQ cluster, node loss and partitions (SPEC §16)

  A fleet that outgrows one broker node runs on a RabbitMQ cluster of three nodes. Every gateway
  here is given the URLs of all three nodes (CLU-1) and FLEET_QUEUE_TYPE=quorum (CLU-2), each under
  its own login, so the broker shows which node holds whose connection. Messages are in flight
  when a node goes: the suite kills nodes with SIGKILL and cuts them off the others' network; a
  provider that cannot do that reports the scenario NOT TESTED, never passed. What the suite reads
  on a cluster is written in CONTRACT §11.

  Background:
    Given a broker
    And the gateways' heartbeat is 4 seconds
    And gateways use an AMQP heartbeat of 2 seconds
    And the gateways' inject bound is 8 seconds
    And every host connects to all nodes of the cluster with its own login

  @CLU-2 @CLU-3 @CLU-4 @smoke-cluster
  Scenario: in quorum mode inboxes, control queues and the dead-letter queue are quorum queues; the roster stays an exclusive classic queue
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    Then the inbox of "lead" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering
    And the inbox of "w1" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering
    And the control queues of "a" and "b" are quorum queues
    And the dead-letter queue is a quorum queue that drops its oldest message when full
    And the roster queues of "a" and "b" are exclusive classic queues

  @CLU-3 @CON-2
  Scenario: a second gateway on a held quorum inbox fails loudly, and no consumer beside the holder is handed a message
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When a second gateway for host "b" starts on the same state
    Then the second gateway for "b" logs the refusal at ERROR and is not ready
    When the probe also consumes the inbox of "w1"
    And "w1" becomes idle
    And "lead" sends "only the holder" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "only the holder"
    And the send returns "injected" within the inject bound
    And the probe's consumer on the inbox of "w1" is handed nothing over a window

  @CLU-3 @CON-2
  Scenario: a gateway that finds its entity's quorum inbox held refuses it loudly and does not consume it, not even as a standby
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the gateway on "b" is killed with SIGKILL
    And the probe holds the inbox of "w1" with a consumer of its own
    And the gateway on "b" starts again, not waited for
    Then the gateway on "b" logs the refusal of the inbox of "w1" at ERROR and is not ready
    And the inbox of "w1" lists only the probe's consumer over a window

  # SPEC §16 changes CAP-4's maxlen path: a quorum inbox refuses the publish (reject-publish), so
  # the sender learns it at once as a failed send instead of a FAILED maxlen for the oldest brief.
  # The length limit is soft on RabbitMQ (limit + 1 is confirmed, FACTS.md): brief 4 may go either way.
  @CLU-4 @PUB-3 @FWD-5
  Scenario: a quorum inbox at its cap refuses further briefs; each sender learns it at once, and nothing is dropped from the head
    Given inboxes hold at most 3 messages
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    When the gateway on "b" is killed with SIGKILL
    And "lead" sends 6 briefs "job-1" to "job-6" to "w1", one after another
    Then sends 5 and 6 return "failed" within the inject bound
    And sends 1, 2 and 3 return "inject_timeout" within the inject bound
    And send 4 ends within the inject bound, whatever the outcome
    When the gateway on "b" is restarted
    Then briefs 1, 2 and 3 each land once in "w1" on "b" or come back to "lead" as FAILED busy
    And herdr on "b" records no inject into "w1" with text "job-5"
    And herdr on "b" records no inject into "w1" with text "job-6"

  # CLU-1's "the TLS variables apply to each" node. Host "b"'s list starts with a node that does
  # not answer and then one whose certificate another CA signed, so a gateway that applies the CA
  # (or verifies) on the first node of its list only cannot pass.
  @CLU-1 @SEC-1 @broker-tls @cluster-tls
  Scenario: over amqps to every node, a gateway verifies each node against its CA and fails over past one whose certificate another CA signed
    Given host "a" connects over amqps to every node of the cluster, trusting the broker's CA
    And host "b" connects over amqps to a node that does not answer, then to a node whose certificate another CA signed, then to every node of the cluster, trusting the broker's CA
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    When "lead" sends "rotate the cluster keys" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "rotate the cluster keys"
    And the send returns "injected" within 10 seconds
    And the broker shows the gateway of "a" connected over TLS as its own login
    And the broker shows the gateway of "b" connected over TLS as its own login
    And the node whose certificate another CA signed completed no TLS session with the gateway on "b"

  @CLU-1 @CLU-5 @FWD-5 @node-loss @smoke-cluster
  Scenario: the node the worker's gateway is connected to dies mid-forward; every send ends, no brief is injected twice, the gateway fails over
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is working
    When "lead" sends 4 briefs "blip-1" to "blip-4" to "w1" at once
    And the node the gateway on "b" is connected to is killed
    Then sends 1, 2, 3 and 4 each end within the inject bound, whatever the outcome
    And every gateway is ready again within 2 heartbeats and two AMQP heartbeats
    And within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    When "w1" becomes idle
    Then herdr on "b" records at most 1 inject of each of "blip-1", "blip-2", "blip-3" and "blip-4" into "w1" while 3 heartbeats pass

  @CLU-1 @CLU-5 @RPL-1 @node-loss
  Scenario Outline: <which> dies while replies flow; every reply ends, and every REPLY the broker confirmed reaches the main exactly once
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When "w1" sends 30 replies "r-1" to "r-30" in the background
    And <which> is killed once 5 of them are confirmed
    Then every reply of "w1" ends within the inject bound
    And every gateway is ready again within 2 heartbeats and two AMQP heartbeats
    And within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    And "lead" drains every reply of "w1" the broker confirmed, each exactly once, within 60 seconds
    And "lead" gets no further message while 3 heartbeats pass

    Examples:
      | which                                        |
      | the node the gateway on "a" is connected to  |
      | the node the gateway on "b" is connected to  |
      | the node leading the inbox of "lead"         |

  @CLU-6 @CLU-5 @RPL-1 @node-partition
  Scenario: the node the main's gateway is connected to is cut off and pauses; the gateway fails over, and after the heal nothing is duplicated to the main
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When "w1" sends 30 replies "p-1" to "p-30" in the background
    And the node the gateway on "a" is connected to is cut off from the others once 5 of them are confirmed
    Then every reply of "w1" ends within the inject bound
    And every gateway is ready again within 2 heartbeats and two AMQP heartbeats
    When the partition heals
    Then "lead" drains every reply of "w1" the broker confirmed, each exactly once, within 60 seconds
    And "lead" gets no further message while 3 heartbeats pass

  # A node cut off from the other nodes only keeps its clients' connections (heartbeats flow) and
  # confirms nothing until the cluster notices (net_ticktime) and pause_minority pauses it. A
  # gateway with the reference's confirm-stall detector (FLEET_CONFIRM_STALL_MS, not SPEC: hence
  # the capability) moves to another node once its confirms stall past the bound while another
  # node answers, seen at the suite's relays (one per node), counted from the cut (CONTRACT §11). The
  # reply issued right after the cut is republished there ([C-18]): on RabbitMQ the new node can
  # confirm it only once the cluster has noticed, hence the longer inject bound.
  @CLU-1 @CLU-6 @PUB-3 @RPL-1 @node-partition @cap-confirm-stall
  Scenario: the node the worker's gateway is connected to is cut off from the other nodes only; the gateway sees its confirms stall and moves before the cluster notices, and the reply in flight is confirmed and drained once
    Given the gateways' confirm stall bound is 2 seconds
    And the gateways' inject bound is 40 seconds
    And host "b" reaches every node of the cluster through a relay of the suite's
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the node the gateway on "b" is connected to is cut off from the other nodes only, its clients' links kept
    And "w1" sends a reply "stalled-1" in the background
    Then the gateway on "b" holds a connection to another node within the confirm stall bound and 2 seconds of the cut
    When the other nodes see the cut-off node down
    Then the reply of "w1" ends confirmed within the inject bound
    When the partition heals
    Then "lead" drains every reply of "w1" the broker confirmed, each exactly once, within 60 seconds
    And "lead" gets no further message while 3 heartbeats pass

  @CLU-7
  Scenario: a quorum gateway that meets a classic inbox stays up and reports that entity not ready; the conversion, killed halfway and run again, loses and doubles nothing
    Given host "b" runs a gateway with a main "w1"
    And the broker holds a classic inbox of a main "lead" with 300 replies from "w1", signed by host "b"
    When host "a" runs a gateway and registers the main "lead" on it
    Then the gateway on "a" stays alive and not ready over a window, and logs at ERROR naming the inbox of "lead"
    When the conversion of the inbox of "lead" is killed with SIGKILL once messages have left the inbox
    And the conversion of the inbox of "lead" runs again to the end
    And the conversion of the inbox of "lead" runs once more
    Then the inbox of "lead" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering
    When the gateway on "a" is restarted
    Then the gateway on "a" is ready within 30 seconds
    And "lead" drains the 300 replies from "w1" in the order sent, each exactly once, within 90 seconds

  # CLU-7's "idempotent" where a kill can break it: in the second step (the inbox already quorum,
  # the rest of the messages still in the conversion's own queue), and at a moment that leaves
  # copies in two places (moved back while the killed conversion still held the originals). Read
  # at the inbox before any gateway consumes it: a gateway's seen-set would hide a copy from the
  # main (CONTRACT §11).
  @CLU-7 @convert-interrupted
  Scenario Outline: the conversion, killed <where>, then run again to the end and once more, leaves every message in the quorum inbox once, in order
    Given host "b" runs a gateway with a main "w1"
    And the broker holds a classic inbox of a main "lead" with 500 replies from "w1", signed by host "b"
    When the conversion of the inbox of "lead" is killed with SIGKILL in its second step, <where>
    And the conversion of the inbox of "lead" runs again to the end
    And the conversion of the inbox of "lead" runs once more
    Then the inbox of "lead" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering
    And the inbox of "lead" holds the 500 replies from "w1" in the order sent, each once

    Examples:
      | where                                                                                  |
      | the inbox already quorum and holding part of the messages                              |
      | at a moment that leaves some messages both in the inbox and in the conversion's own queue |

  # CLU-7's "idempotent" at the first step's own risky moment: a moved batch confirmed (its copies
  # safe in the conversion's queue) while its originals are still unacked in the inbox. The suite
  # makes that moment rather than waiting for it: the conversion reaches the broker through a
  # relay of the suite's that, once the broker's publisher confirms cover 150 publishes, drops
  # whatever the conversion sends next (its acks); then it is killed. A rerun that moves the
  # originals again without regard to the copies doubles them. Read at the inbox (CONTRACT §11).
  @CLU-7 @convert-interrupted @convert-step-one
  Scenario: the conversion, killed in its first step between the broker's confirm of a copy and the ack of its original, then run again to the end and once more, leaves every message in the quorum inbox once, in order
    Given host "b" runs a gateway with a main "w1"
    And the broker holds a classic inbox of a main "lead" with 500 replies from "w1", signed by host "b"
    When the conversion of the inbox of "lead" is killed with SIGKILL in its first step, once the broker has confirmed 150 of its copies and before their originals' acks reach it
    And the conversion of the inbox of "lead" runs again to the end
    And the conversion of the inbox of "lead" runs once more
    Then the inbox of "lead" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering
    And the inbox of "lead" holds the 500 replies from "w1" in the order sent, each once
