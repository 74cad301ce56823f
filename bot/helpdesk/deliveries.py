"""The helpdesk's side of the outbox: a case row is sent by loading its case and handing it to its destination."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from bot.delivery import Delivery
from bot.errors import RemoteError
from bot.helpdesk.case import Destination, HandoffCase, case_id_for
from bot.store import DeliveryRecord, Store


@runtime_checkable
class TrackedDestination(Protocol):
    """A destination that posts in steps and saves its progress on the row (``Delivery.save``)."""

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None: ...


class CaseDeliveries:
    """The ``Sender`` of case rows: one per process, for the destinations configured here."""

    def __init__(self, store: Store, destinations: Sequence[Destination]) -> None:
        self._store = store
        self._by_name = {d.name: d for d in destinations}

    @property
    def destinations(self) -> list[str]:
        return list(self._by_name)

    def label(self, row: DeliveryRecord) -> str:
        return case_id_for(row.case_number) if row.case_number is not None else f"case row {row.id}"

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None:
        record = await self._store.cases.get(row.case_number) if row.case_number is not None else None
        if record is None:
            raise RemoteError(f"{self.label(row)}: case not found", kind="validation")  # nothing to send, ever
        case = HandoffCase.from_record(record)
        destination = self._by_name[row.destination]
        if isinstance(destination, TrackedDestination):
            return await destination.deliver_tracked(case, delivery)
        return await destination.deliver(case)
