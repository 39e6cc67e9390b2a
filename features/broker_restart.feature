@broker-restart
Feature: Broker restart — what the broker keeps comes back, what gateways hold is redelivered once (SPEC §12 CON-3, §5, §6, §8, §13)

  The broker is stopped and started again on its data: the process node gets SIGTERM and is started
  again on the same data dir, node name and ports; the container gets `docker stop` and `docker start`
  (its host ports are pinned). Gateways keep the FLEET_AMQP_URL they were started with and must come
  back on their own. A restart breaks every connection into the broker, so these scenarios run on a
  broker of their own (a second node of the same provider and kind, started when the first of them
  needs it), one at a time, while the other scenarios go on on the shared one. The url: provider
  cannot restart a broker: these scenarios are left out there and reported not tested.

  Gateways here heartbeat every second, so "a heartbeat" is one second, stretched by the time scale.

  Background:
    Given a broker the suite can restart, to this scenario alone
    And the gateways' inject bound is 8 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @CON-3 @RPL-1 @TOP-2
  Scenario: replies held for a main survive the restart and are drained once each
    When "w1" replies "held one"
    And "w1" replies "held two"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 2 unacknowledged messages
    When the broker restarts
    Then every gateway reported not ready while the broker was away
    And every gateway is ready again within 60 seconds
    And "lead" drains the replies "held one" and "held two" from "w1", each exactly once, within 30 seconds

  @FWD-1 @FWD-5 @CON-3
  Scenario: briefs acked before the restart are injected at most once; briefs after it exactly once
    Given "w1" is working
    When "lead" sends "in flight 1" to "w1", timed
    And "lead" sends "in flight 2" to "w1", timed
    Then within 10 seconds the broker shows 2 messages to "w1" acked, with nothing ready or unacknowledged
    When the broker restarts
    Then the timed sends each ended within the inject bound, whatever the outcome
    And every gateway is ready again within 60 seconds
    Given "w1" finishes each brief quickly
    When "w1" becomes idle
    Then herdr on "b" records at most 1 inject of each of "in flight 1" and "in flight 2" into "w1" while 3 heartbeats pass
    When "lead" sends 2 briefs "after-1" to "after-2" to "w1" at once
    Then sends 1 and 2 return "injected" within the inject bound
    And herdr on "b" records exactly 1 inject of each of "after-1" and "after-2" into "w1" while 3 heartbeats pass

  @PRS-2 @CON-3 @TOP-3
  Scenario: presence is rebuilt from heartbeats once the broker is back
    Given host "c" runs a gateway with a worker "w2" whose parent is "lead"
    Then within 2 heartbeats the rosters of "a", "b" and "c" all list "lead" on "a", "w1" on "b" and "w2" on "c"
    When the broker goes down
    Then every gateway reports not ready within 10 seconds
    And within 5 heartbeats the roster of "a" no longer lists "w1"
    And within 5 heartbeats the roster of "b" no longer lists "w2"
    And within 5 heartbeats the roster of "c" no longer lists "lead"
    When the broker comes back
    Then every gateway is ready again within 60 seconds
    And within 3 heartbeats the rosters of "a", "b" and "c" all list "lead" on "a", "w1" on "b" and "w2" on "c"
    And host "a" has its control and roster queues
    And host "c" has its control and roster queues

  @MIG-3 @MIG-2 @CON-3
  Scenario: a migration interrupted by the restart finishes after it, and the main sees each reply once, in order
    Given the broker also holds a v1.0.0 legacy queue of pane "w1:p9" with 800 replies
    When host "b" starts registering a worker "w9" whose parent is "lead" and who was v1 pane "w1:p9"
    And the broker restarts once 50 of the 800 replies of v1 pane "w1:p9" have moved
    Then the legacy queue of v1 pane "w1:p9" still held replies when the broker was back
    And every gateway is ready again within 60 seconds
    And the legacy queue of v1 pane "w1:p9" is gone within 60 seconds
    When "lead" polls messages from "w9" until 800 have arrived within 90 seconds
    Then they are the replies of v1 pane "w1:p9" in order, each a REPLY from "w9" with its UUIDv5 msgId
    And "lead" gets no further message while 3 heartbeats pass
    And the inbox of "lead" holds no message within 10 seconds

  @TOP-1 @TOP-2 @TOP-3 @ENV-1 @SIG-1 @RPL-1 @CON-3
  Scenario: gateways publish persistent messages (ASK and ANSWER transient) into durable queues, so the restart keeps them
    SPEC §2: delivery_mode 2 for every kind but ASK and ANSWER (1); SPEC §1: every queue durable but
    roster.<host> (exclusive, auto-delete). A durable probe queue copies bridge.msg, bridge.roster and
    bridge.control right across the restart; the envelope checks of features/envelope.feature judge
    what gateways publish once they are back.

    Given host "c" runs a gateway with profiles "claude=claude --yes"
    And the probe keeps a durable copy of what is published on bridge.msg, bridge.roster and bridge.control
    And "lead" is waiting for a message
    When "w1" asks "which branch?" with a timeout of 120 seconds
    Then the wait returns an ASK from "w1" with text "which branch?" within 10 seconds
    When "lead" answers the question with "main"
    Then the ask returns "answered" with answer "main" within 10 seconds
    Given "w1" finishes each brief quickly
    When "lead" sends "persist me" to "w1"
    Then the send returns "injected" within 10 seconds
    When "w1" replies "kept for the main"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When "lead" spawns a "claude" worker "w9" on "c" with brief "a spawned brief"
    Then the spawn of "w9" returns "present" within 10 seconds
    And every message the durable copy holds from a gateway is persistent but ASK and ANSWER, among them ASK, ANSWER, SEND, INJECTED, REPLY, PRESENCE and SPAWN
    And every queue the gateways declared is durable but the roster queues, which are exclusive and auto-delete
    When the broker restarts
    Then every gateway is ready again within 60 seconds
    And every queue the gateways declared before the restart is there again
    And every queue the gateways declared is durable but the roster queues, which are exclusive and auto-delete
    And "lead" drains the replies "kept for the main" from "w1", each exactly once, within 30 seconds
    Given the probe watches the wire
    When "lead" sends "after the restart" to "w1", timed
    Then the timed send of "after the restart" returns "injected" within 10 seconds
    And every message the probe saw a gateway publish is complete, in long strings, and signed
    And every message the durable copy holds from a gateway since the restart is persistent but ASK and ANSWER, among them SEND, INJECTED and PRESENCE

  # SPEC [C-19]: a gateway that comes back after the others' grace (its entities gone from their
  # rosters) announces each entity, confirmed, before publishing anything from it; else its REPLY
  # reaches a main that no longer lists the worker and is rejected `from_not_on_host` (lost).
  @CON-3 @RPL-1 @SIG-2 @PRS-2
  Scenario: a gateway back long after the restart announces its worker before the worker's reply
    Given the probe keeps a durable copy of what is published on bridge.msg, bridge.roster and bridge.control
    When the broker goes down
    And the gateway on "b" is frozen with SIGSTOP
    And the broker comes back
    Then the gateway on "a" is ready within 30 seconds
    And within 5 heartbeats the roster of "a" no longer lists "w1"
    When the gateway on "b" is thawed with SIGCONT
    And "w1" starts replying "back after the outage"
    Then the reply returns its msgId within 30 seconds
    And on the wire, "w1" published nothing after the restart before its presence up
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w1" with text "back after the outage"
