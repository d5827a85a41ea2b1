/*
 * uffd.h - the one place that defines userfaultfd and pagemap interfaces newer than the 6.1 kernel
 * headers this build sees (Debian 12), with the values of the kernel's uapi. Each definition is
 * guarded so that newer headers win. The kernel tells at run time what it supports (UFFDIO_API
 * features, ioctls bits); uffd.c checks those and refuses what is missing, naming it.
 */
#ifndef USWAP_MM_UFFD_H
#define USWAP_MM_UFFD_H

#include <linux/fs.h>
#include <linux/types.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

/* /dev/userfaultfd (6.1 has it, older headers may not). */
#ifndef USERFAULTFD_IOC
#define USERFAULTFD_IOC     0xAA
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif
/* userfaultfd(2) flag: handle user-mode faults only (what unprivileged users get). */
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* Features after 6.1: 6.5 unpopulated WP markers, 6.6 poison, 6.7 async WP, 6.8 move. */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

/*
 * UFFDIO_MOVE (6.8): move pages from src to dst without copying. The destination range must be
 * registered with the uffd the ioctl is issued on; the source may be any private anonymous range.
 * Pages must be exclusive to this process (not shared with a fork child): -EBUSY otherwise.
 * @move returns the bytes moved (also on a partial failure).
 */
#ifndef _UFFDIO_MOVE
#define _UFFDIO_MOVE (0x05)
struct uffdio_move {
	__u64 dst;
	__u64 src;
	__u64 len;
#define UFFDIO_MOVE_MODE_DONTWAKE        ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
	__u64 mode;
	__s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif

/* UFFDIO_POISON (6.6): a later access gets SIGBUS. */
#ifndef _UFFDIO_POISON
#define _UFFDIO_POISON (0x08)
struct uffdio_poison {
	struct uffdio_range range;
#define UFFDIO_POISON_MODE_DONTWAKE ((__u64)1 << 0)
	__u64 mode;
	__s64 updated;
};
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#endif

/* UFFDIO_CONTINUE with write-protection (6.3). */
#ifndef UFFDIO_CONTINUE_MODE_WP
#define UFFDIO_CONTINUE_MODE_WP ((__u64)1 << 1)
#endif

/* PAGEMAP_SCAN (6.7): ioctl on /proc/self/pagemap reporting page categories of a range. */
#ifndef PAGEMAP_SCAN
#define PAGE_IS_WPALLOWED  (1 << 0)
#define PAGE_IS_WRITTEN    (1 << 1)
#define PAGE_IS_FILE       (1 << 2)
#define PAGE_IS_PRESENT    (1 << 3)
#define PAGE_IS_SWAPPED    (1 << 4)
#define PAGE_IS_PFNZERO    (1 << 5)
#define PAGE_IS_HUGE       (1 << 6)
#define PAGE_IS_SOFT_DIRTY (1 << 7)

struct page_region {
	__u64 start;
	__u64 end;
	__u64 categories;
};

#define PM_SCAN_WP_MATCHING   (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)

struct pm_scan_arg {
	__u64 size;
	__u64 flags;
	__u64 start;
	__u64 end;
	__u64 walk_end;
	__u64 vec;
	__u64 vec_len;
	__u64 max_pages;
	__u64 category_inverted;
	__u64 category_mask;
	__u64 category_anyof_mask;
	__u64 return_mask;
};

#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif

/* process_madvise() and other pidfd calls on ourselves without a pidfd (6.14). */
#ifndef PIDFD_SELF_THREAD_GROUP
#define PIDFD_SELF_THREAD_GROUP (-10001)
#endif

/* PROCMAP_QUERY (6.11): ioctl on /proc/self/maps describing the vma at an address. */
#ifndef PROCMAP_QUERY
#define PROCMAP_QUERY_VMA_READABLE   0x01
#define PROCMAP_QUERY_VMA_WRITABLE   0x02
#define PROCMAP_QUERY_VMA_EXECUTABLE 0x04
#define PROCMAP_QUERY_VMA_SHARED     0x08

struct procmap_query {
	__u64 size;
	__u64 query_flags;
	__u64 query_addr;
	__u64 vma_start;
	__u64 vma_end;
	__u64 vma_flags;
	__u64 vma_page_size;
	__u64 vma_offset;
	__u64 inode;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 vma_name_size;
	__u32 build_id_size;
	__u64 vma_name_addr;
	__u64 build_id_addr;
};

#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#endif

/* /proc/self/pagemap entries (Documentation/admin-guide/mm/pagemap.rst). */
#define PM_PRESENT (1ull << 63)
#define PM_SWAP    (1ull << 62)

#endif
