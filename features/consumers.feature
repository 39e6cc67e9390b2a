@consumers
Feature: Connections and consumers — one consumer per inbox, recovery after a blip (SPEC §12)

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds
    And gateways use an AMQP heartbeat of 2 seconds

  # The second gateway starts while the first holds the queues and is alive, then the first is
  # frozen: the refusal does not depend on how fast the second reaches the broker (a start that
  # took longer than the broker's drop of a frozen holder would rightly take the inbox over).
  @CON-1 @CON-2 @crash
  Scenario: a second gateway is refused the inboxes the first holds, and takes them over once the first freezes and the broker drops it
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When a second gateway for host "b" starts on the same state
    Then the second gateway for "b" logs the refusal at ERROR and is not ready
    When the gateway on "b" is frozen with SIGSTOP
    Then the second gateway for "b" becomes ready within 20 seconds
    When the first gateway for "b" is replaced by the second
    And "w1" becomes idle
    And "lead" sends "carry on" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "carry on"
    And the send returns "injected" within 10 seconds

  @CON-3 @RPL-1 @FWD-1
  Scenario: after the broker link is cut, gateways reconnect, re-consume, and nothing is lost or doubled
    Given gateways reach the broker through a link the suite can cut
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When "w1" replies "before the blip"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When the link to the broker is cut
    Then the gateway on "a" is ready within 20 seconds
    And the gateway on "b" is ready within 20 seconds
    And the inbox of "w1" has one consumer, and a second exclusive consumer is refused
    When "lead" is waiting for a message
    Then the wait returns a REPLY from "w1" with text "before the blip" within 10 seconds
    When "lead" polls all messages
    Then "lead" gets no message
    Given "w1" is idle
    When "lead" sends "after the blip" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "after the blip"
    And the send returns "injected" within 10 seconds

  @FWD-5 @CON-3 @PUB-3
  Scenario: sends in flight when the broker link is cut each end within the inject bound
    Given gateways reach the broker through a link the suite can cut
    And the gateways' inject bound is 8 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is working
    When "lead" sends 4 briefs "blip-1" to "blip-4" to "w1" at once
    And the link to the broker is cut
    Then sends 1, 2, 3 and 4 each end within the inject bound, whatever the outcome
    And the gateway on "a" is ready within 20 seconds
    And the gateway on "b" is ready within 20 seconds

  # SPEC [C-18] (a MAY, declared as the capability `republish`): the REPLY reaches the broker and
  # the main's inbox, its confirm is lost with the link; once reconnected the worker's gateway
  # publishes the very same message again, so bridge_reply returns its msgId instead of failing,
  # and the main's dedup (RPL-1, [C-15]) drains it once.
  @PUB-3 @RPL-1 @cap-republish
  Scenario: a REPLY whose confirm was lost with the link is republished once reconnected, and the main drains it once
    Given gateways reach the broker through a link the suite can cut
    And the gateways' inject bound is 20 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the broker's answers through the link are lost
    And "w1" starts replying "the release notes are ready"
    Then within 10 seconds the inbox of "lead" holds 1 message, ready or unacknowledged
    And the reply has not returned yet
    When the link to the broker is cut
    Then the reply returns its msgId within 20 seconds
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w1" with text "the release notes are ready"
    And message 1 has the msgId the reply returned
    When "lead" polls messages from "w1"
    Then "lead" gets no message

  # CONTRACT §3 `not_connected` (a [C-16] companion): a gateway that cannot reach the broker for
  # the whole inject bound has handed it nothing, and says so — a definite failure, not an unknown
  # one — and what it said was not sent never arrives once the broker is back.
  @PUB-3 @FWD-5 @cap-not-connected
  Scenario: a brief and a reply asked for while the broker is out of reach fail not_connected and never arrive
    Given gateways reach the broker through a link the suite can cut
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    When the broker goes out of reach through the link
    Then every gateway reports not ready within 20 seconds
    When "lead" sends "sent while cut off" to "w1"
    And "w1" starts replying "replied while cut off"
    Then the send returns "failed" with reason "not_connected" within the inject bound
    And the reply returns "failed" with reason "not_connected" within the inject bound
    When the broker is in reach through the link again
    Then every gateway is ready again within 30 seconds
    And herdr on "b" records no inject into "w1"
    When "lead" polls messages from "w1"
    Then "lead" gets no message

  # The other side of the same rule, judged whatever the gateway declares: a SEND that reached the
  # broker (its confirm lost with the link) may be unknown, never `not_connected`.
  @PUB-3 @C-16
  Scenario: a brief that reached the broker and lost its confirm is never answered not_connected
    Given gateways reach the broker through a link the suite can cut
    And the gateways' inject bound is 20 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    When the broker's answers through the link are lost
    And "lead" sends "reached the broker" to "w1"
    Then within 10 seconds the inbox of "w1" holds 1 message, ready or unacknowledged
    When the link to the broker is cut
    Then herdr on "b" records exactly 1 inject into "w1" with text "reached the broker"
    And the send does not answer not_connected

  # SPEC [C-18] allows a republish (the REPLY's, above) of every kind but SEND, and that holds for
  # every gateway, republishing or not: the forward path is at-most-once, and a receiver that
  # restarted between two copies has forgotten the msgId, so its dedup (FWD-6) is no guard. The
  # worker's gateway is down, so every copy that is routed stays in its inbox: after the main's
  # SEND lost its confirm with the link, the wire carries one SEND to the worker and the inbox
  # holds it once, until the send has ended and over a window after; once the worker's gateway is
  # back, the brief is injected once.
  @C-18 @PUB-3 @FWD-1
  Scenario: a SEND whose confirm was lost with the link is never published again: the worker's inbox holds one copy, injected once
    Given gateways reach the broker through a link the suite can cut
    And the gateways' inject bound is 20 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe copies every message routed to "w1"
    When the gateway on "b" is killed with SIGKILL
    And the broker's answers through the link are lost
    And "lead" sends "one copy only" to "w1", timed
    Then within 10 seconds the inbox of "w1" holds 1 message, ready or unacknowledged
    When the link to the broker is cut
    Then the gateway on "a" is ready within 20 seconds
    And until the timed send of "one copy only" has ended, and over a window after, one SEND was routed to "w1" and its inbox holds one message
    And the timed sends each ended within the inject bound, whatever the outcome
    Given "w1" is idle
    When the gateway on "b" is restarted
    Then the gateway on "b" is ready within 20 seconds
    And herdr on "b" records exactly 1 inject of each of "one copy only" into "w1" while 3 heartbeats pass

  # Found by the soak (issue 35): a REPLY that reached the broker and lost its confirm, whose
  # [C-18] republish then found no connection within the bound, was answered `not_connected` —
  # and the main drained it. Once an attempt may have reached the broker, the answer is unknown.
  # Worker and main share a host: across two hosts, whether the main's gateway, back first, still
  # knows the worker when the REPLY arrives depends on the two gateways' reconnect backoffs, and
  # SIG-2's wait ([C-7]) lets it reject the REPLY as `from_not_on_host` if not (seen under load).
  @PUB-3 @C-16 @RPL-1
  Scenario: a reply that reached the broker and found no connection again within the bound is never answered not_connected
    Given gateways reach the broker through a link the suite can cut
    And host "a" runs a gateway with a main "lead"
    And host "a" also runs a worker "w1" whose parent is "lead"
    When the broker's answers through the link are lost
    And "w1" starts replying "reached the broker before the outage"
    Then within 10 seconds the inbox of "lead" holds 1 message, ready or unacknowledged
    When the broker goes out of reach through the link
    Then the reply does not answer not_connected
    When the broker is in reach through the link again
    Then every gateway is ready again within 30 seconds
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
