@cap-cluster @quorum-returns
Feature: Quorum inboxes — a held message outlives the broker's delivery limit (SPEC §16 CLU-2, CLU-5 (a); §6 RPL-1)

  A quorum inbox counts every return of a message it delivered: RabbitMQ 4.0–4.2 counts each one
  against the queue's delivery limit (20 by default; RabbitMQ 3.10 has no default limit) and then
  dead-letters the message (reason delivery_limit). A REPLY held unacked for a main that does not
  drain (RPL-1) is returned whenever the connection holding it is lost, so a main's gateway that
  fails over more than twenty times would lose a confirmed REPLY, which CLU-5 (a) and the pull
  path's at-least-once do not allow, however the gateway keeps it. Quorum queues work on a single
  node, so this runs wherever a gateway declares `cluster` (FLEET_QUEUE_TYPE=quorum, CLU-2).

  Background:
    Given a broker
    And gateways started from now on run quorum queues
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @CLU-5 @RPL-1
  Scenario: a reply held through more lost connections than RabbitMQ 4's default delivery limit still reaches its main, once
    When "w1" replies "held through 25 failovers"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When the broker closes the connection consuming the inbox of "lead" 25 times, each time once it holds 1 unacknowledged message again
    Then within 30 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w1" with text "held through 25 failovers"
    When "lead" polls all messages
    Then "lead" gets no message
