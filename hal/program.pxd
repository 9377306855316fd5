from libcpp.vector cimport vector


cdef class Program:
    cdef readonly tuple commands
    cdef readonly str dependencies
    cdef readonly Py_ssize_t lane_limit
    cdef readonly Py_ssize_t slots_needed
    cdef readonly dict slot_users
    cdef readonly Py_ssize_t constants_needed
    cdef readonly dict constant_users
    cdef readonly tuple indirect  # the dispatch_indirect commands' indices
    cdef readonly tuple static_indirect  # those of them whose counts are read when a submission starts
    cdef readonly tuple regions  # the regions' indices (hal.commands.Region, each with its body's Program)
    cdef readonly tuple collectives  # the collectives' indices (hal.commands.Collective)
    cdef readonly tuple nested  # per execute_commands at this level, its commands' index range (start, stop)
    cdef readonly object transients  # hal.transients.TransientPlan, set by the command buffer's end()
    cdef readonly bint frozen

    # The dependency DAG, transitively reduced: command i waits for the commands
    # members[group_start[g]:group_start[g + 1]] of its group g = group_of[i] (-1: for nothing).
    cdef vector[Py_ssize_t] group_of
    cdef vector[Py_ssize_t] group_start
    cdef vector[Py_ssize_t] members
    cdef vector[Py_ssize_t] group_last  # per group, its latest member

    # Replay in recording order: barrier[i] says an execution barrier goes just before command i.
    cdef vector[char] barrier

    # The graph layout: node k runs command node_command[k] (-1: an empty join node) after the nodes
    # node_deps[dep_start[k]:dep_start[k + 1]] (all earlier nodes); command i is node command_node[i].
    cdef vector[Py_ssize_t] node_command
    cdef vector[Py_ssize_t] dep_start
    cdef vector[Py_ssize_t] node_deps
    cdef vector[Py_ssize_t] command_node

    # Non-empty segments: their first command and the lanes they run in.
    cdef vector[Py_ssize_t] segment_start
    cdef vector[Py_ssize_t] segment_width
    cdef object layout_source  # the function that lays the graph out on first use (None: laid out)

    # The read side backends use (the fields above are the planner's to write and the Program's to keep): the
    # graph layout, for a backend whose emitter asks for it at end() (Emitter.graph_layout) or after need_layout().
    cdef inline Py_ssize_t node_count(self) noexcept:
        return self.node_command.size()

    cdef inline Py_ssize_t command_of(self, Py_ssize_t node) noexcept:
        """The command node `node` runs; -1: an empty join node."""
        return self.node_command[node]

    cdef inline Py_ssize_t node_of_command(self, Py_ssize_t command) noexcept:
        return self.command_node[command]

    cdef inline Py_ssize_t first_wait(self, Py_ssize_t node) noexcept:
        """Node `node` waits for nodes waited_node(w) for w in [first_wait(node), first_wait(node + 1))."""
        return self.dep_start[node]

    cdef inline Py_ssize_t waited_node(self, Py_ssize_t w) noexcept:
        return self.node_deps[w]

    cdef inline bint barrier_before(self, Py_ssize_t command) noexcept:
        """Does a replay in recording order put an execution barrier just before `command`?"""
        return self.barrier[command]

    cdef void need_layout(self) except *
    cdef vector[Py_ssize_t] sinks(self) except *
    cdef vector[Py_ssize_t] node_blocks(self, list ranges) except *

    # The planner's (hal.dependencies) writes.
    cdef int reserve(self, Py_ssize_t commands, bint layout) except -1
    cdef Py_ssize_t add_group(self, vector[Py_ssize_t]& preds)
    cdef void add_node(self, Py_ssize_t command, vector[Py_ssize_t]& deps)
    cdef void freeze(self, tuple commands, dict slot_users, Py_ssize_t slots_needed, dict constant_users,
                     Py_ssize_t constants_needed, tuple indirect, tuple regions, tuple collectives, tuple nested)


cdef class Emitter:
    cdef readonly bint reads_arguments  # the recorder gives plain dispatches their arguments as C data

    cpdef void command(self, Program program, object command) except *
    cdef bint resubmitted(self, object device, object command_buffer, object binding_table) except -1
