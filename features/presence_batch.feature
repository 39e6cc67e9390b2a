@presence @presence-batch
Feature: Host-batched presence — one signed heartbeat per host carries all its entities (SPEC §17)

  A gateway that declares `presence-batch` heartbeats its `_gateway` entry with the list of every
  live local entity (PRB-1), renews whatever another host's batch lists and drops what it no
  longer lists (PRB-2), still announces up, down and agentStatus changes one by one (PRB-3), and
  heartbeats entities one by one only while an old, per-entity gateway is live (PRB-4). The probe
  plays a batching host "probe" with signed batches of fake entities, or an old gateway of host
  "probe" whose heartbeat does not declare presence-batch; what gateways send is judged on its tap
  of bridge.roster. Gateways heartbeat every second here (the suite's setting).

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire

  @cap-presence-batch @PRB-1 @PRB-2 @PRB-4
  Scenario: where every gateway batches, entities stay listed on batches alone, past their ttl
    Then the probe sees a batch of host "b" that declares presence-batch and lists "w1" as an idle worker
    And over 4 heartbeats the roster of "a" keeps listing "w1" on "b", and the probe sees no heartbeat of it of its own

  @cap-presence-batch @PRB-1 @PRB-2 @batch-groups
  Scenario: an entity's groups travel in its batch entry and stay in rosters built from batches
    Given host "a" also runs a worker "g1" whose parent is "lead" in groups "red,blue"
    And host "c" runs a gateway
    Then the probe sees a batch of host "a" that declares presence-batch and lists "g1" in groups "red" and "blue"
    And within 2 heartbeats the roster of "c" lists "g1" on "a" in groups "red" and "blue"
    And over 4 heartbeats the rosters of "b" and "c" keep listing "g1" on "a" in groups "red" and "blue"

  @cap-presence-batch @PRB-4 @batch-old-peer
  Scenario: a per-entity gateway gets each entity's heartbeat while it is live, and none once it has been silent for 3H
    When the probe heartbeats as a per-entity gateway until host "b" has heartbeated "w1" on its own twice, within 5 heartbeats
    Then once that gateway has been silent for 3 heartbeats, over 3 heartbeats the probe sees no heartbeat of "w1" of its own from host "b"

  @cap-presence-batch @PRB-3
  Scenario: an entity coming up, changing its agentStatus or going down is still announced on its own at once
    Given host "b" also runs a worker "w2" whose parent is "lead"
    Then within 1 heartbeat the probe sees host "b" announce "w2" up on its own
    When "w1" becomes working
    Then within 2 heartbeats the probe sees host "b" announce "w1" as working on its own
    When "w2" is stopped through the local API of "b"
    Then within 1 heartbeat the probe sees host "b" announce "w2" down on its own
    And over 1 heartbeat the probe sees no heartbeat of "w2" after its down

  @cap-presence-batch @PRB-2
  Scenario: an entity missing from its host's latest batch is gone from every roster within a heartbeat
    When the probe publishes a batch of host "probe" listing "x1" and "x2"
    Then within 2 heartbeats every roster lists "x1" and "x2" on host "probe"
    When the probe publishes a batch of host "probe" listing "x1"
    Then within 1 heartbeat every roster no longer lists "x2" on host "probe"
    And within 1 heartbeat every roster lists "x1" on host "probe"

  @cap-presence-batch @PRB-2 @PRS-3
  Scenario: a batch entry claiming a gid live on another host is refused, the rest of the batch applies
    When the probe publishes a batch of host "probe" listing "w1" and "x3"
    Then within 2 heartbeats every roster lists "x3" on host "probe"
    And every gateway logged the last batch's conflicting entry as presence_conflict, and dead-lettered no batch
    And the roster of "a" still lists "w1" on "b" only
    And the roster of "b" still lists "w1" on "b" only

  @cap-presence-batch @PRB-2 @SIG-2
  Scenario: a message from an entity known only through its host's batch passes SIG-2
    When the probe publishes a batch of host "probe" listing "x4"
    Then within 2 heartbeats every roster lists "x4" on host "probe"
    When "x4" on the probe host sends a valid message to "lead"

  @cap-presence-batch @PRB-4 @reference
  Scenario: with a per-entity gateway alive a batching gateway heartbeats each entity too, and stops once it is gone
    Given host "c" runs a gateway with presence batching off
    Then within 4 heartbeats the probe sees host "b" heartbeat "w1" on its own twice after the old gateway "c" appeared
    When the gateway on "c" is killed with SIGKILL
    Then within 5 heartbeats the roster of "b" no longer lists the gateway of "c"
    And over 3 heartbeats the probe sees no heartbeat of "w1" of its own from host "b"
