@migration
Feature: Migration from v1.0.0 — sender-keyed legacy queues move into recipient-keyed v2 inboxes (SPEC §13, TOP-5)

  The broker starts with the v1.0.0 state of fixtures/legacy/v1.0.0.json: queue "agent.w1:p2.inbox"
  holds 3 replies sent from v1 pane "w1:p2", queue "agent.w1:p7.inbox" holds 2 replies of a pane no
  v2 worker claims. Both are durable and have no arguments. A worker is registered with the v1 pane
  id it had ("legacyPaneId"); its replies must reach its parent's v2 inbox as REPLYs from the
  worker, in order, once, with msgId = UUIDv5 of the legacy message_id.

  Background:
    Given a broker holding the v1.0.0 state of fixtures/legacy
    And the gateways know the v1 panes "w1:p2,w1:p7"
    And host "a" runs a gateway with a main "P"

  @MIG-2 @MIG-1 @smoke
  Scenario: the replies of a legacy queue reach the parent main in order, exactly once, and the legacy queue is deleted
    When host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p2"
    And "P" polls messages from "W" until 3 have arrived within 20 seconds
    Then they are the replies of v1 pane "w1:p2" in order, each a REPLY from "W" with its UUIDv5 msgId
    And the legacy queue of v1 pane "w1:p2" is gone
    And the inbox of "P" holds no message within 10 seconds
    When "P" polls all messages
    Then "P" gets no message
    And the gateway on "a" started once, is ready, and logged no PRECONDITION_FAILED

  @MIG-2
  Scenario: a worker on another host than its main moves its replies across hosts
    When host "b" runs a gateway with a worker "W" whose parent is "P" and who was v1 pane "w1:p2"
    And "P" polls messages from "W" until 3 have arrived within 20 seconds
    Then they are the replies of v1 pane "w1:p2" in order, each a REPLY from "W" with its UUIDv5 msgId
    And the legacy queue of v1 pane "w1:p2" is gone
    And the gateway on "b" started once, is ready, and logged no PRECONDITION_FAILED

  @MIG-3
  Scenario: a gateway killed in the middle of the move finishes it after a restart, and the main sees each reply once
    Given the broker also holds a v1.0.0 legacy queue of pane "w1:p9" with 800 replies
    When host "a" starts registering a worker "W" whose parent is "P" and who was v1 pane "w1:p9"
    And the gateway on "a" is killed with SIGKILL once 50 replies of v1 pane "w1:p9" have moved
    Then the legacy queue of v1 pane "w1:p9" still holds replies
    When the gateway on "a" is restarted
    Then the legacy queue of v1 pane "w1:p9" is gone
    When "P" polls messages from "W" until 800 have arrived within 60 seconds
    Then they are the replies of v1 pane "w1:p9" in order, each a REPLY from "W" with its UUIDv5 msgId
    And the inbox of "P" holds no message within 10 seconds

  @MIG-3
  Scenario: a reply moved just before a crash but still in the legacy queue reaches the main once
    Given host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p5"
    When the gateway on "a" is killed with SIGKILL
    And the broker also holds a v1.0.0 legacy queue of pane "w1:p5" with 5 replies
    And the inbox of "P" already holds the migrated copy of reply 1 of v1 pane "w1:p5" from "W", signed by host "a"
    When the gateway on "a" is restarted
    And "P" polls messages from "W" until 5 have arrived within 30 seconds
    Then they are the replies of v1 pane "w1:p5" in order, each a REPLY from "W" with its UUIDv5 msgId
    And the legacy queue of v1 pane "w1:p5" is gone
    And the inbox of "P" holds no message within 10 seconds
    When "P" polls all messages
    Then "P" gets no message

  @MIG-3
  Scenario: after a restart the main's inbox is consumed only once its legacy queue has moved
    Given host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p6"
    When the gateway on "a" is killed with SIGKILL
    And the broker also holds a v1.0.0 legacy queue of pane "w1:p6" with 800 replies
    And the inbox of "P" and the legacy queue of v1 pane "w1:p6" are watched
    And the gateway on "a" is restarted
    Then the inbox of "P" was consumed only once the legacy queue of v1 pane "w1:p6" was gone
    When "P" polls messages from "W" until 800 have arrived within 60 seconds
    Then they are the replies of v1 pane "w1:p6" in order, each a REPLY from "W" with its UUIDv5 msgId

  @MIG-3 @MIG-2
  Scenario: restarting a gateway that already migrated changes nothing
    Given host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p2"
    And "P" polls messages from "W" until 3 have arrived within 20 seconds
    When the gateway on "a" is restarted
    And "W" replies "after the restart"
    And "P" polls messages from "W" until 1 has arrived within 20 seconds
    Then "P" gets exactly 1 message
    And message 1 is a REPLY from "W" with text "after the restart"
    And the legacy queue of v1 pane "w1:p2" is gone
    And the legacy queue of v1 pane "w1:p7" still holds 2 messages, no consumer and no arguments

  @TOP-5 @MIG-1
  Scenario: the broker refuses the legacy queue with the v2 arguments, and the gateway never asks it to
    When the probe redeclares the legacy queue of v1 pane "w1:p2" with the v2 inbox arguments
    Then the broker refuses it with 406 PRECONDITION_FAILED
    And the legacy queue of v1 pane "w1:p2" still holds 3 messages, no consumer and no arguments
    When host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p2"
    And the gateway on "a" is restarted
    Then the legacy queue of v1 pane "w1:p2" is gone
    And the gateway on "a" started 2 times, is ready, and logged no PRECONDITION_FAILED

  @MIG-2
  Scenario: a legacy queue of a pane no local worker claims is left alone
    Given host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p2"
    When the gateway on "a" is restarted
    Then the legacy queue of v1 pane "w1:p2" is gone
    And the legacy queue of v1 pane "w1:p7" is left alone: 2 messages, no consumer and no arguments over a window
    And the legacy queue of v1 pane "w1:p7" still holds 2 messages, no consumer and no arguments
    And the legacy queue of v1 pane "w1:p2" is gone

  @MIG-2
  Scenario: a legacy backlog longer than the main's inbox cap moves without a reply dead-lettered
    Given gateways started from now on cap inboxes at 20 messages
    And host "b" runs a gateway with a main "Q"
    And the broker also holds a v1.0.0 legacy queue of pane "w1:p8" with 80 replies
    When host "b" also runs a worker "V" whose parent is "Q" and who was v1 pane "w1:p8"
    And "Q" polls messages from "V" until 80 have arrived within 60 seconds
    Then they are the replies of v1 pane "w1:p8" in order, each a REPLY from "V" with its UUIDv5 msgId
    And the legacy queue of v1 pane "w1:p8" is gone

  @MIG-2
  Scenario: looking for a legacy queue that does not exist disturbs nothing else
    When the broker connections into the scenario's vhost are noted
    And host "a" also runs a worker "W" whose parent is "P" and who was v1 pane "w1:p404"
    Then the gateway on "a" is ready within 10 seconds
    And every broker connection noted before stays open for 3 heartbeats
